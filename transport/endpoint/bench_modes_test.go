package endpoint_test

import (
	"github.com/vstellar/vstellar/transport/endpoint"
	"github.com/vstellar/vstellar/transport/udp"
)

// benchModes are the loop's modes BenchmarkEndpoint measures.
var benchModes = []struct {
	name  string
	newEP func(*udp.Conn) *endpoint.Endpoint
}{
	{"blocking", func(s *udp.Conn) *endpoint.Endpoint { return endpoint.New(s, nil) }},
	{"polling", func(s *udp.Conn) *endpoint.Endpoint {
		return endpoint.NewWith(s, nil, endpoint.Options{Poll: &endpoint.Polling{}})
	}},
}
