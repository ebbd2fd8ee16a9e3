package daemon

import "net/http"

// HTTPClientForTest exposes a Client's http.Client to tests sending raw
// requests.
func HTTPClientForTest(c *Client) *http.Client { return c.hc }
