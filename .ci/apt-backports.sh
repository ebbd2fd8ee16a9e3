# Sourced by .ci/run. has_backports ROOT: whether the apt sources under
# ROOT (/ on the machine) list bookworm-backports, in one-line form
# (sources.list, *.list) or deb822 form (*.sources, "Suites:" listing
# several suites). A second entry for the same suite makes apt refuse
# every command (conflicting Signed-By), so .ci/run adds one only when
# this says there is none. Files apt ignores (*.save, *.disabled) and
# commented lines do not count.
has_backports() {
	local root=$1 f
	for f in "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] && grep -qE '^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?[^[:space:]]+[[:space:]]+bookworm-backports([[:space:]]|$)' "$f" && return 0
	done
	for f in "$root"/etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && grep -qiE '^Suites:([[:space:]]+[^[:space:]]+)*[[:space:]]+bookworm-backports([[:space:]]|$)' "$f" && return 0
	done
	return 1
}
