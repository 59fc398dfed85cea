// Package apicost measures what a leader-elected controller costs the API
// server: it runs replicas of a binary (fastover-example, or the client-go
// baseline leaderbaseline) as internal/fleet does, each talking to
// kube-apiserver through a proxy of its own (tests/harness/faultproxy) that
// counts every request by verb and resource and every watch stream, and
// takes the difference of the counts over a steady-state window, with the
// leader told apart from the standbys by the Lease.
//
// The tests (tests/e2e) assert the goals on three replicas; the benchmark
// (tests/bench/apicost, in make bench) prints the table for 3 and 30.
package apicost

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/tests/harness/faultproxy"
)

// Fleet is a running set of replicas, each behind a counting proxy.
type Fleet struct {
	Impl    string // a name for the tables
	F       *fleet.Fleet
	proxies map[string]*faultproxy.Proxy
	start   map[string]faultproxy.Counts
	holder  string
	begun   time.Time
}

// Start starts n replicas of binary in a new namespace ns behind a
// selector-less Service "ctl", with a kubeconfig bound to the documented
// Role (fleet.LeaderRole) through a counting proxy each, and waits for the
// Service to answer from a leader.
func Start(ctx context.Context, env *cluster.Env, impl, binary, ns string, n int, d fleet.Durations) (*Fleet, error) {
	if n < 1 {
		return nil, fmt.Errorf("apicost: %d replicas: want at least 1", n)
	}
	if err := env.CreateNamespace(ctx, ns, nil); err != nil {
		return nil, err
	}
	f, err := fleet.New(env, binary, ns, "ctl", d)
	if err != nil {
		return nil, err
	}
	f.Name = impl
	kubeconfig, err := env.KubeconfigFor(ctx, ns, "ctl", fleet.LeaderRole)
	if err != nil {
		return nil, err
	}
	token, err := tokenOf(kubeconfig)
	if err != nil {
		return nil, err
	}
	af := &Fleet{Impl: impl, F: f, proxies: map[string]*faultproxy.Proxy{}}
	f.KubeconfigOf = func(r *fleet.Replica) (string, error) {
		p := af.proxies[r.ID]
		if p == nil {
			if p, err = faultproxy.Start(env.Config); err != nil {
				return "", err
			}
			af.proxies[r.ID] = p
		}
		path := filepath.Join(env.Dir, "kubeconfig-count-"+r.ID)
		return path, p.WriteKubeconfig(path, "ctl", token, ns)
	}
	if err := f.CreateService(ctx, nil); err != nil {
		af.Stop()
		return nil, err
	}
	if err := f.Add(n); err != nil {
		af.Stop()
		return nil, err
	}
	if _, err := f.WaitServing(ctx, "", 2*time.Minute); err != nil {
		af.Stop()
		return nil, fmt.Errorf("%s: %w", impl, err)
	}
	return af, nil
}

func tokenOf(kubeconfig string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return "", err
	}
	for _, a := range cfg.AuthInfos {
		if a.Token != "" {
			return a.Token, nil
		}
	}
	return "", fmt.Errorf("apicost: no token in %s", kubeconfig)
}

// Stop kills the replicas and closes the proxies.
func (af *Fleet) Stop() {
	for _, r := range af.F.Replicas {
		if r.Proc != nil {
			r.Proc.Stop(syscall.SIGKILL, 0)
		}
	}
	for _, p := range af.proxies {
		p.Close()
	}
}

// Begin starts the window: it notes the Lease's holder and every replica's
// counts.
func (af *Fleet) Begin(ctx context.Context) error {
	h, _, err := af.F.Holder(ctx)
	if err != nil {
		return err
	}
	if af.F.ByID(h) == nil {
		return fmt.Errorf("%s: the Lease is held by %q, not a replica", af.Impl, h)
	}
	af.holder = h
	af.start = map[string]faultproxy.Counts{}
	for id, p := range af.proxies {
		af.start[id] = p.Counts()
	}
	af.begun = time.Now()
	return nil
}

// End ends the window and returns what each replica asked in it. It
// fails if the leader changed or a replica stopped in the window: then
// it was not a steady state.
func (af *Fleet) End(ctx context.Context) (*Result, error) {
	if af.start == nil {
		return nil, errors.New("apicost: End without Begin")
	}
	res := &Result{Impl: af.Impl, Replicas: len(af.F.Replicas), Window: time.Since(af.begun), Leader: af.holder,
		ByReplica: map[string]faultproxy.Counts{}}
	for id, p := range af.proxies {
		res.ByReplica[id] = p.Counts().Sub(af.start[id])
	}
	h, _, err := af.F.Holder(ctx)
	if err != nil {
		return nil, err
	}
	if h != af.holder {
		return res, fmt.Errorf("%s: the leader changed in the window, from %s to %s", af.Impl, af.holder, h)
	}
	for _, r := range af.F.Replicas {
		if !r.Proc.Running() {
			return res, fmt.Errorf("%s: %s stopped in the window", af.Impl, r.ID)
		}
	}
	return res, nil
}

// Result is what the replicas asked of the API server in a window.
type Result struct {
	Impl      string
	Replicas  int
	Window    time.Duration
	Leader    string
	ByReplica map[string]faultproxy.Counts
}

func (r *Result) perMin(n int) float64 { return float64(n) / r.Window.Minutes() }

// LeaderCounts is what the leader asked.
func (r *Result) LeaderCounts() faultproxy.Counts { return r.ByReplica[r.Leader] }

// Standbys returns the standbys' counts, in the order of their identities.
func (r *Result) Standbys() []faultproxy.Counts {
	ids := make([]string, 0, len(r.ByReplica))
	for id := range r.ByReplica {
		if id != r.Leader {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	out := make([]faultproxy.Counts, len(ids))
	for i, id := range ids {
		out[i] = r.ByReplica[id]
	}
	return out
}

// LeaderPerMin is the leader's requests a minute, watch opens left out.
func (r *Result) LeaderPerMin() float64 { return r.perMin(r.LeaderCounts().NonWatch()) }

// StandbyPerMin returns the standbys' requests a minute, watch opens
// left out, sorted.
func (r *Result) StandbyPerMin() []float64 {
	var out []float64
	for _, c := range r.Standbys() {
		out = append(out, r.perMin(c.NonWatch()))
	}
	slices.Sort(out)
	return out
}

// OpenWatches returns the watch streams each replica holds open at the
// end of the window, sorted.
func (r *Result) OpenWatches() []int {
	var out []int
	for _, c := range r.ByReplica {
		out = append(out, c.OpenWatches)
	}
	slices.Sort(out)
	return out
}

// TotalPerMin is the fleet's requests a minute, watch opens included.
func (r *Result) TotalPerMin() float64 {
	n := 0
	for _, c := range r.ByReplica {
		n += c.Total()
	}
	return r.perMin(n)
}

// WatchOpensPerMin is the fleet's watch opens a minute.
func (r *Result) WatchOpensPerMin() float64 {
	n := 0
	for _, c := range r.ByReplica {
		n += c.Watches()
	}
	return r.perMin(n)
}

// Breakdown describes counts by kind, a minute, e.g. "get leases 30.0,
// update leases 30.0"; per divides them (the number of standbys, for a
// mean over standbys).
func (r *Result) Breakdown(cs []faultproxy.Counts) string {
	sum := map[faultproxy.Request]int{}
	for _, c := range cs {
		for k, v := range c.Requests {
			sum[k] += v
		}
	}
	keys := make([]faultproxy.Request, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, r.perMin(sum[k])/float64(max(len(cs), 1))))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Median of sorted values.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
