// Command warmstandby measures what a warm standby buys a client-go
// controller with a large cache: examples/informer-controller, three
// replicas, its informer over -objects ConfigMaps of the local API server,
// warm (informers started and synced while standing by, in
// leader.Config.Prepare) against cold (informers started once leading,
// the usual client-go pattern), side by side in one run. It signals the
// leader, SIGTERM (planned handover) or SIGKILL, and times, from the
// signal:
//
//   - the new leader's first unit of work with a synced cache: the time
//     it stamped its ConfigMap (its clock, the same host's), the stamp
//     saying how many objects its cache held, which must be all of them;
//   - its endpoint: when a watch of the Service's EndpointSlices sees
//     them name the new leader only.
//
// Runs of the two kinds alternate, so drift in the machine's load hits
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

func main() { benchrun.Main("warmstandby", run) }

// kind is warm or cold: its fleet and what the run watches.
type kind struct {
	name      string
	f         *opfleet.Fleet
	stamps    *opfleet.Stamps
	published *fleet.Log
}

type scenario struct {
	name string
	sig  syscall.Signal
}

// sample is one handover's times from the signal.
type sample struct{ work, endpoint time.Duration }

func run() error {
	bin := benchrun.BinFlag("informer-controller")
	runs := flag.Int("runs", 5, "runs per kind and scenario")
	objects := flag.Int("objects", 20000, "ConfigMaps in the informers' cache")
	size := flag.Int("size", 1000, "bytes of each ConfigMap")
	durations := flag.String("durations", "15s/10s/2s", "lease duration/renew deadline/retry period")
	if err := benchrun.Parse(); err != nil {
		return err
	}
	switch {
	case *runs < 1:
		return errors.New("-runs must be at least 1")
	case *objects < 1:
		return errors.New("-objects must be at least 1")
	}
	d, err := fleet.ParseDurations(*durations)
	if err != nil {
		return err
	}
	binDir, err := benchrun.Binaries(*bin, "informer-controller")
	if err != nil {
		return err
	}
	controller := binDir.Path("informer-controller")
	env, err := binDir.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
	ctx := context.Background()

	const ns = "bench-warm"
	if err := env.CreateNamespace(ctx, ns, nil); err != nil {
		return err
	}
	start := time.Now()
	if err := opfleet.SeedConfigMaps(ctx, env.Config, ns, *objects, *size); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "created %d ConfigMaps of %d bytes in %v\n", *objects, *size, time.Since(start).Round(time.Millisecond))

	kinds := []*kind{
		{name: "cold (informers when leading)", f: opfleet.NewInformerFleet(env, controller, ns, "cold", false, d)},
		{name: "warm (informers in Prepare)", f: opfleet.NewInformerFleet(env, controller, ns, "warm", true, d)},
	}
	for _, k := range kinds {
		if err := k.f.Setup(ctx); err != nil {
			return err
		}
		if k.stamps, err = k.f.WatchStamps(ctx); err != nil {
			return err
		}
		if k.published, err = k.f.Service().Watch(ctx); err != nil {
			return err
		}
		if err := k.f.Add(3); err != nil {
			return err
		}
		defer k.f.StopAll()
		if _, err := k.stamps.Next(0, "", 2*time.Minute); err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
		if err := k.f.ReadyAll(ctx, 2*time.Minute); err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
	}

	scenarios := []scenario{{"planned (SIGTERM)", syscall.SIGTERM}, {"killed (SIGKILL)", syscall.SIGKILL}}
	results := map[[2]int][]sample{}
	for si, sc := range scenarios {
		for r := range *runs {
			for i := range kinds {
				ki := (i + r) % len(kinds)
				s, err := measure(ctx, kinds[ki], sc.sig, d, *objects)
				if err != nil {
					return fmt.Errorf("%s, %s, run %d: %w", sc.name, kinds[ki].name, r+1, err)
				}
				fmt.Fprintf(os.Stderr, "%s, %s, run %d: first work %v, endpoint %v\n", sc.name, kinds[ki].name, r+1, s.work, s.endpoint)
				results[[2]int{si, ki}] = append(results[[2]int{si, ki}], s)
			}
		}
	}

	fmt.Printf("\nhandover of a 3-replica client-go controller (examples/informer-controller) with an informer over %d ConfigMaps of %d bytes, durations %s, %d runs each:\n", *objects, *size, d, *runs)
	fmt.Printf("from the signal to the leader to the new leader's first unit of work with a synced cache, and to the Service's EndpointSlice naming it\n\n")
	fmt.Printf("| %-17s | %-29s | %-30s | %-30s |\n", "scenario", "standbys", "first work p50 (min–max)", "endpoint p50 (min–max)")
	fmt.Printf("|%s|%s|%s|%s|\n", strings.Repeat("-", 19), strings.Repeat("-", 31), strings.Repeat("-", 32), strings.Repeat("-", 32))
	p50 := map[[2]int]time.Duration{}
	for si, sc := range scenarios {
		for ki, k := range kinds {
			v := results[[2]int{si, ki}]
			work, ep := make([]time.Duration, len(v)), make([]time.Duration, len(v))
			for i, s := range v {
				work[i], ep[i] = s.work, s.endpoint
			}
			fmt.Printf("| %-17s | %-29s | %-30s | %-30s |\n", sc.name, k.name, benchstat.Summary(work), benchstat.Summary(ep))
			p50[[2]int{si, ki}] = benchstat.Median(work)
		}
	}
	fmt.Println()
	cold, warm := p50[[2]int{0, 0}], p50[[2]int{0, 1}]
	fmt.Printf("planned: warm p50 %s vs cold %s: %.1fx faster (goal: warm at most 100ms, at least 10x better than cold)\n",
		benchstat.Round(warm), benchstat.Round(cold), float64(cold)/float64(max(warm, time.Microsecond)))
	fmt.Printf("killed:  warm p50 %s vs cold %s (lease %s)\n", benchstat.Round(p50[[2]int{1, 1}]), benchstat.Round(p50[[2]int{1, 0}]), d.Lease)
	return nil
}

// measure signals the fleet's leader and times the new leader's first
// work and endpoint; then it restarts the signalled replica and waits for
// it to stand by ready (a warm one, with its cache synced).
func measure(ctx context.Context, k *kind, sig syscall.Signal, d fleet.Durations, objects int) (sample, error) {
	h, err := k.f.HandOver(ctx, k.stamps, k.published, sig, d.Lease+time.Minute)
	if err != nil {
		return sample{}, err
	}
	if h.Stamp.Cached != objects {
		return sample{}, fmt.Errorf("%s took over with %d objects in its cache, not %d", h.New.ID, h.Stamp.Cached, objects)
	}
	if err := k.f.Restart(h.Old); err != nil {
		return sample{}, err
	}
	if err := k.f.WaitReady(ctx, h.Old, 2*time.Minute); err != nil {
		return sample{}, err
	}
	// Let it settle as a standby (its watch of the Lease established).
	time.Sleep(time.Second)
	return sample{work: h.Work, endpoint: h.Endpoint}, nil
}
