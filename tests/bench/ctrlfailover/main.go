// Command ctrlfailover measures the handover of a controller-runtime
// operator (examples/configmap-operator, three replicas) side by side in
// one run: with controller-runtime's own leader election
// (LeaderElectionReleaseOnCancel) and with fastover's, through the
// leader/ctrlmanager adapter, with the same lease duration, renew deadline
// and retry period. It signals the leader, SIGTERM (planned handover) or
// SIGKILL, and times, from the signal:
//
//   - the new leader's first reconcile: the time its reconciler stamped
//     the ConfigMap (its clock, the same host's);
//   - its endpoint: when a watch of the Service's EndpointSlices sees them
//     name the new leader only (fastover only: controller-runtime's
//     election publishes no endpoint, "–").
//
// Runs of the two elections alternate, so drift in the machine's load hits
// both. `make bench` runs it on a local control plane (internal/cluster).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/opfleet"
	"github.com/fastover/fastover/tests/harness/benchrun"
	"github.com/fastover/fastover/tests/harness/benchstat"
)

func main() { benchrun.Main("ctrlfailover", run) }

// impl is one election, its fleet and what the run watches.
type impl struct {
	name      string
	f         *opfleet.Fleet
	stamps    *opfleet.Stamps
	published *fleet.Log // nil without endpoint
}

type scenario struct {
	name string
	sig  syscall.Signal
}

// sample is one run's times from the signal.
type sample struct {
	reconcile time.Duration
	endpoint  time.Duration // 0: none
}

func run() error {
	bin := benchrun.BinFlag("configmap-operator")
	runs := flag.Int("runs", 5, "runs per election and scenario")
	durations := flag.String("durations", "15s/10s/2s", "lease duration/renew deadline/retry period, the same for both elections")
	if err := benchrun.Parse(); err != nil {
		return err
	}
	if *runs < 1 {
		return errors.New("-runs must be at least 1")
	}
	d, err := fleet.ParseDurations(*durations)
	if err != nil {
		return err
	}
	binDir, err := benchrun.Binaries(*bin, "configmap-operator")
	if err != nil {
		return err
	}
	operator := binDir.Path("configmap-operator")
	env, err := binDir.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
	ctx := context.Background()

	impls := []*impl{
		{name: "controller-runtime LE", f: opfleet.New(env, operator, "bench-cr", "op", opfleet.ControllerRuntime, d)},
		{name: "fastover ctrlmanager", f: opfleet.New(env, operator, "bench-fastover", "op", opfleet.Fastover, d)},
	}
	for _, im := range impls {
		if err := im.f.Setup(ctx); err != nil {
			return err
		}
		if im.stamps, err = im.f.WatchStamps(ctx); err != nil {
			return err
		}
		if im.f.Election == opfleet.Fastover {
			if im.published, err = im.f.Service().Watch(ctx); err != nil {
				return err
			}
		}
		if err := im.f.Add(3); err != nil {
			return err
		}
		defer im.f.StopAll()
		if _, err := im.stamps.Next(0, "", time.Minute); err != nil {
			return fmt.Errorf("%s: %w", im.name, err)
		}
	}
	// Let every standby settle (caches synced, warm).
	time.Sleep(max(d.Retry, 2*time.Second))

	scenarios := []scenario{{"planned (SIGTERM)", syscall.SIGTERM}, {"killed (SIGKILL)", syscall.SIGKILL}}
	results := map[[2]int][]sample{}
	for si, sc := range scenarios {
		for r := range *runs {
			for k := range impls {
				ii := (k + r) % len(impls)
				s, err := measure(ctx, impls[ii], sc.sig, d)
				if err != nil {
					return fmt.Errorf("%s, %s, run %d: %w", sc.name, impls[ii].name, r+1, err)
				}
				fmt.Fprintf(os.Stderr, "%s, %s, run %d: first reconcile %v, endpoint %v\n", sc.name, impls[ii].name, r+1, s.reconcile, s.endpoint)
				results[[2]int{si, ii}] = append(results[[2]int{si, ii}], s)
			}
		}
	}

	fmt.Printf("\nhandover of a 3-replica controller-runtime operator (examples/configmap-operator), durations %s, %d runs each:\n", d, *runs)
	fmt.Printf("from the signal to the leader to the new leader's first reconcile, and to the Service's EndpointSlice naming it\n\n")
	fmt.Printf("| %-17s | %-21s | %-30s | %-30s |\n", "scenario", "election", "first reconcile p50 (min–max)", "endpoint p50 (min–max)")
	fmt.Printf("|%s|%s|%s|%s|\n", strings.Repeat("-", 19), strings.Repeat("-", 23), strings.Repeat("-", 32), strings.Repeat("-", 32))
	p50 := map[[2]int]time.Duration{}
	maxOf := map[[2]int]time.Duration{}
	for si, sc := range scenarios {
		for ii, im := range impls {
			k := [2]int{si, ii}
			rec, ep := benchstat.Summary(times(results[k], func(s sample) time.Duration { return s.reconcile })), "–"
			if im.published != nil {
				ep = benchstat.Summary(times(results[k], func(s sample) time.Duration { return s.endpoint }))
			}
			fmt.Printf("| %-17s | %-21s | %-30s | %-30s |\n", sc.name, im.name, rec, ep)
			v := times(results[k], func(s sample) time.Duration { return s.reconcile })
			p50[k], maxOf[k] = benchstat.Median(v), benchstat.Max(v)
		}
	}
	fmt.Println()
	cr, fo := p50[[2]int{0, 0}], p50[[2]int{0, 1}]
	fmt.Printf("planned: fastover p50 %s vs controller-runtime %s: %.1fx faster (goal: at least 10x)\n", benchstat.Round(fo), benchstat.Round(cr), float64(cr)/float64(fo))
	fmt.Printf("killed:  fastover p50 %s, max %s: lease %+dms at p50, %+dms at most (goal: at most lease + 100ms); controller-runtime p50 %s\n",
		benchstat.Round(p50[[2]int{1, 1}]), benchstat.Round(maxOf[[2]int{1, 1}]),
		(p50[[2]int{1, 1}] - d.Lease).Milliseconds(), (maxOf[[2]int{1, 1}] - d.Lease).Milliseconds(), benchstat.Round(p50[[2]int{1, 0}]))
	return nil
}

// measure signals the fleet's leader and times the new leader's first
// reconcile and endpoint; then it restarts the signalled replica as a
// standby.
func measure(ctx context.Context, im *impl, sig syscall.Signal, d fleet.Durations) (sample, error) {
	h, err := im.f.HandOver(ctx, im.stamps, im.published, sig, d.Lease+30*time.Second)
	if err != nil {
		return sample{}, err
	}
	if err := im.f.Restart(h.Old); err != nil {
		return sample{}, err
	}
	// Let the restarted replica settle as a standby (caches synced; a
	// controller-runtime standby tries every retry period).
	time.Sleep(max(d.Retry, 2*time.Second))
	return sample{reconcile: h.Work, endpoint: h.Endpoint}, nil
}

// times returns one time of each sample.
func times(v []sample, of func(sample) time.Duration) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, s := range v {
		out[i] = of(s)
	}
	return out
}
