package charts_test

import (
	clientscheme "k8s.io/client-go/kubernetes/scheme"
)

var scheme = clientscheme.Scheme
