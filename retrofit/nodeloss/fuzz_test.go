package nodeloss

import (
	"fmt"
	"testing"
	"time"
)

// scenarioFrom makes a small cluster, a loss and flags from fuzz bytes.
func scenarioFrom(b []byte) Scenario {
	next := func() int {
		if len(b) == 0 {
			return 0
		}
		v := int(b[0])
		b = b[1:]
		return v
	}
	f := Flags{
		NodeMonitorPeriod:         time.Duration(1+next()%10) * time.Second,
		NodeMonitorGracePeriod:    time.Duration(1+next()%60) * time.Second,
		NodeEvictionRate:          float64(next()%11) / 10,
		SecondaryNodeEvictionRate: float64(next()%11) / 100,
		UnhealthyZoneThreshold:    float64(1+next()%100) / 100,
		LargeClusterSizeThreshold: next() % 10,
		KubeAPIQPS:                float64(1 + next()%50),
		KubeAPIBurst:              1 + next()%40,
	}
	s := Scenario{Flags: f, Start: time.Duration(next()%20-10) * time.Second, Horizon: 2 * time.Hour}
	nodes := 1 + next()%12
	for i := range nodes {
		v := next()
		n := Node{Name: fmt.Sprintf("n%02d", i), Zone: fmt.Sprint(v % 3), Excluded: v&4 != 0, Lost: v&8 != 0}
		n.LostAt = time.Duration(next()%240-60) * time.Second
		if v&16 != 0 && n.Lost {
			n.Tainted, n.TaintedAt = true, n.LostAt+time.Duration(next()%120)*time.Second
		}
		for j := range next() % 6 {
			tol := []time.Duration{0, 300 * time.Second, Forever, 5 * time.Second}[next()%4]
			n.Pods = append(n.Pods, Pod{Name: fmt.Sprintf("p%d", j), Ready: v&32 != 0, Toleration: tol})
		}
		s.Nodes = append(s.Nodes, n)
	}
	return s
}

// Whatever the cluster and flags, the model ends, and what it predicts
// happens in order: Unknown after the grace period, the taint after
// Unknown, an eviction after the taint.
func FuzzSimulate(f *testing.F) {
	f.Add([]byte{4, 9, 1, 1, 55, 5, 19, 29, 10, 11, 8, 60, 3, 9, 70, 1, 8, 0})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{9, 59, 10, 10, 99, 9, 49, 39, 19, 11, 255, 200, 5, 0, 1, 2, 3, 4, 56, 90, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := scenarioFrom(b)
		r, err := Simulate(s)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]Node{}
		for _, n := range s.Nodes {
			byName[n.Name] = n
		}
		for _, n := range r.Nodes {
			in := byName[n.Name]
			if n.Unknown != Never && in.LostAt >= s.Start && n.Unknown <= in.LostAt+s.Flags.NodeMonitorGracePeriod {
				t.Fatalf("%s Unknown at %v, lost at %v", n.Name, n.Unknown, in.LostAt)
			}
			if n.Tainted != Never && !in.Tainted && (n.Unknown == Never || n.Tainted < n.Unknown) {
				t.Fatalf("%s tainted at %v, Unknown at %v", n.Name, n.Tainted, n.Unknown)
			}
			if n.Untainted != Never && n.Untainted < n.Tainted {
				t.Fatalf("%s untainted at %v, tainted at %v", n.Name, n.Untainted, n.Tainted)
			}
			for _, p := range n.Pods {
				if p.Evicted != Never && (n.Tainted == Never || p.Evicted < min(n.Tainted, s.Start) || p.Evicted < s.Start) {
					t.Fatalf("%s/%s evicted at %v, tainted at %v", n.Name, p.Name, p.Evicted, n.Tainted)
				}
			}
		}
	})
}
