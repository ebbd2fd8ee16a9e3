package remote

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"

	"github.com/vstellar/vstellar/fabric"
)

// Labels separate these uses of the cluster secret from any other, and
// the id from the token.
const (
	idLabel    = "vstellar rc connection v1"
	tokenLabel = "vstellar rc stream v2"
)

// identity is ConnIdentity; a test forces a collision through it.
var identity = ConnIdentity

// ConnIdentity derives, for the packet stream from -> to (the requests
// of the QP at from, which the QP at to receives) starting at psn (from's
// sq_psn, to's rq_psn), the connection id that every packet to the QP at
// to carries, and the stream's token, which its DATA packets and the
// ACKs for them carry (docs/wire.md, section 9). Both are HMAC-SHA256
// under the cluster secret: the id of the tenant and both QP addresses,
// the token of those and psn. Both hosts compute them from the QP
// attributes alone, so no handshake is needed: a QP pair's receive side
// uses ConnIdentity(secret, tenant, remote, local, rq_psn), its send side
// ConnIdentity(secret, tenant, local, remote, sq_psn). The id does not
// depend on psn (a host must address its peer before it knows that
// PSN: a QP in RTR acknowledges requests before its own sq_psn is set);
// the token does, so each incarnation of a QP pair with new PSNs has
// new tokens and refuses the packets of the old one.
func ConnIdentity(secret []byte, tenant uint32, from, to fabric.Addr, psn uint32) (id uint32, token uint64) {
	var pair [4 + 2*(16+4)]byte
	binary.BigEndian.PutUint32(pair[0:], tenant)
	n := 4 + copy(pair[4:], from.GID[:])
	binary.BigEndian.PutUint32(pair[n:], from.QPN)
	n += 4 + copy(pair[n+4:], to.GID[:])
	binary.BigEndian.PutUint32(pair[n:], to.QPN)
	var psnb [4]byte
	binary.BigEndian.PutUint32(psnb[:], psn)

	var sum [sha256.Size]byte
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(idLabel))
	mac.Write(pair[:])
	id = binary.BigEndian.Uint32(mac.Sum(sum[:0]))
	mac.Reset()
	mac.Write([]byte(tokenLabel))
	mac.Write(pair[:])
	mac.Write(psnb[:])
	token = binary.BigEndian.Uint64(mac.Sum(sum[:0]))
	return id, token
}
