package realvm

import "testing"

func TestPerftestRow(t *testing.T) {
	bw := `---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      200              112.45             110.80 		   0.001773
---------------------------------------------------------------------------------------
`
	row, err := PerftestRow(bw)
	if err != nil || len(row) != 5 || row[0] != 65536 || row[3] != 110.80 {
		t.Fatalf("bandwidth: %v, %v", row, err)
	}
	lat := ` #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       200          41.20          95.31        44.10                45.02        4.01            70.11                95.31  
`
	if row, err = PerftestRow(lat); err != nil || len(row) != 9 || row[4] != 44.10 {
		t.Fatalf("latency: %v, %v", row, err)
	}
	if _, err := PerftestRow("Couldn't connect to 10.0.0.1:18515\n"); err == nil {
		t.Fatal("no row, no error")
	}
	if _, err := PerftestRow(" #bytes #iterations\n Conflicting CPU frequency values\n"); err == nil {
		t.Fatal("a row of words was taken for numbers")
	}
}
