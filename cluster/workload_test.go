package cluster_test

import (
	"net/http"
)

var _ = http.StatusServiceUnavailable
