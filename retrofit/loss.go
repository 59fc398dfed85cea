package retrofit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Loss is a loss of nodes that has not happened, for the audit's what-if
// (--lose): Nodes by name, or Count nodes of Zone (every node of it if
// Count is 0), or Count nodes of the largest zone.
type Loss struct {
	Zone  string   `json:"zone,omitempty"`
	Count int      `json:"count,omitempty"`
	Nodes []string `json:"nodes,omitempty"`
}

// String is the --lose value that parses to l.
func (l Loss) String() string {
	switch {
	case len(l.Nodes) > 0:
		return "nodes=" + strings.Join(l.Nodes, ",")
	case l.Zone != "" && l.Count > 0:
		return fmt.Sprintf("zone=%s:%d", l.Zone, l.Count)
	case l.Zone != "":
		return "zone=" + l.Zone
	}
	return strconv.Itoa(l.Count)
}

// ParseLoss parses a --lose value: "N" (N nodes of the largest zone),
// "zone=ZONE" (all of it), "zone=ZONE:N", or "nodes=NAME,NAME". A zone is
// named as the audit lists zones ("region/zone"; "/zone" without a region).
func ParseLoss(s string) (Loss, error) {
	bad := func(why string) (Loss, error) {
		return Loss{}, fmt.Errorf("--lose %q: %s (want N, zone=ZONE, zone=ZONE:N or nodes=NAME,...)", s, why)
	}
	count := func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%q is not a count of nodes (1 or more)", v)
		}
		return n, nil
	}
	key, value, named := strings.Cut(s, "=")
	switch {
	case !named:
		n, err := count(s)
		if err != nil {
			return bad(err.Error())
		}
		return Loss{Count: n}, nil
	case key == "zone":
		zone, n, hasCount := strings.Cut(value, ":")
		if zone == "" {
			return bad("no zone named")
		}
		l := Loss{Zone: zone}
		if hasCount {
			c, err := count(n)
			if err != nil {
				return bad(err.Error())
			}
			l.Count = c
		}
		return l, nil
	case key == "nodes":
		var l Loss
		for _, name := range strings.Split(value, ",") {
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				return bad(fmt.Sprintf("node name %q: %s", name, strings.Join(errs, "; ")))
			}
			if !slices.Contains(l.Nodes, name) {
				l.Nodes = append(l.Nodes, name)
			}
		}
		return l, nil
	}
	return bad(fmt.Sprintf("unknown key %q", key))
}
