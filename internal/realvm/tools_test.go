package realvm

import (
	"math"
	"testing"
)

// perftest's result tables by column name: bandwidth, latency, C's -nan,
// and errors for what does not add up.
func TestPerftestColumns(t *testing.T) {
	bw := `---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      200              112.45             110.80 		   0.001773
---------------------------------------------------------------------------------------
`
	cols, err := PerftestColumns(bw)
	if err != nil || len(cols) != 5 || cols["#bytes"] != 65536 || cols["BW average[MB/sec]"] != 110.80 || cols["MsgRate[Mpps]"] != 0.001773 {
		t.Fatalf("bandwidth: %v, %v", cols, err)
	}
	lat := ` #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       200          41.20          95.31        44.10                45.02        4.01            70.11                95.31  
`
	if cols, err = PerftestColumns(lat); err != nil || len(cols) != 9 || cols["t_typical[usec]"] != 44.10 || cols["99.9% percentile[usec]"] != 95.31 {
		t.Fatalf("latency: %v, %v", cols, err)
	}
	// C's "-nan" where perftest cannot tell a figure (t_stdev after a
	// 273 ms outlier) is NaN; the rest of the row is read.
	cols, err = PerftestColumns(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]\n" +
		" 8       1000          77.88          273304.01      1080.33  \t       2090.92     \t-nan   \t\t23441.44 \t\t273304.01\n")
	if err != nil || !math.IsNaN(cols["t_stdev[usec]"]) || cols["99% percentile[usec]"] != 23441.44 {
		t.Fatalf("a row with -nan: %v, %v", cols, err)
	}
	for name, out := range map[string]string{
		"no table":    "Couldn't connect to 10.0.0.1:18515\n",
		"header only": " #bytes     #iterations    BW peak[MiB/sec]\n------\n",
		"short row":   " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n 65536 200 13.93\n",
		"unit-less":   " #bytes     #iterations    BW peak\n 65536 200 13.93\n",
		"words":       " #bytes #iterations\n Conflicting CPU frequency values\n",
	} {
		if cols, err := PerftestColumns(out); err == nil {
			t.Errorf("%s: columns %v, want an error", name, cols)
		}
	}
}

// ucx_perftest's final row, from its real output (TCG guests), and errors
// for what is not one.
func TestUCXPerftestFinal(t *testing.T) {
	out := `+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |       overhead (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
[thread 0]               632    203.500   791.882   791.882        0.01       0.01        1263        1263
Final:                   200      4.000    91.865    91.865      680.35     680.35       10940       10941
`
	r, err := UCXPerftestFinal(out)
	if err != nil || r != (UCXResult{Iterations: 200, Median: 4, Average: 91.865, Overall: 91.865, MBps: 680.35, MsgRate: 10941}) {
		t.Fatalf("final row: %+v, %v", r, err)
	}
	for name, out := range map[string]string{
		"no row":       "[thread 0]               632    203.500   791.882   791.882        0.01       0.01        1263        1263\n",
		"short row":    "Final:                   200      4.000    91.865\n",
		"not a number": "Final:                   200      4.000    91.865    91.865      680.35     680.35       10940       n/a\n",
		"error":        "UCX  ERROR failed to setup RTE transport: Invalid parameter\n",
	} {
		if r, err := UCXPerftestFinal(out); err == nil {
			t.Errorf("%s: %+v, want an error", name, r)
		}
	}
}
