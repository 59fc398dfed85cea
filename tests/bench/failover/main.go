// Command failover measures how fast a three-replica controller fails over,
// side by side in the same run: fastover's leader library (fastover-example)
// against client-go's tools/leaderelection with the same durations and the
// same endpoint-writing callback (leaderbaseline). For each setting of
// lease duration / renew deadline / retry period it signals the leader,
// SIGTERM (planned handover) or SIGKILL (unplanned failover), and times
// the first answer from the new leader to a client that keeps resolving
// the Service through its EndpointSlices and calling GET /. Runs of the two
// implementations alternate, so drift in the machine's load hits both.
// `make bench` runs it on a local control plane (internal/cluster).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/tests/harness/benchrun"
	"github.com/fastover/fastover/tests/harness/benchstat"
)

func main() { benchrun.Main("failover", run) }

type impl struct {
	name   string
	binary string
}

type scenario struct {
	name string
	sig  syscall.Signal
}

func run() error {
	bin := benchrun.BinFlag("fastover-example and leaderbaseline")
	runs := flag.Int("runs", 10, "runs per implementation, scenario and setting")
	settings := flag.String("durations", "15s/10s/2s,4s/3s/1s", "lease duration/renew deadline/retry period settings, comma-separated")
	if err := benchrun.Parse(); err != nil {
		return err
	}
	if *runs < 1 {
		return errors.New("--runs must be at least 1")
	}
	var ds []fleet.Durations
	for _, s := range strings.Split(*settings, ",") {
		d, err := fleet.ParseDurations(s)
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	binDir, err := benchrun.Binaries(*bin, "leaderbaseline", "fastover-example")
	if err != nil {
		return err
	}
	impls := []impl{
		{"client-go leaderelection", binDir.Path("leaderbaseline")},
		{"fastover leader", binDir.Path("fastover-example")},
	}
	scenarios := []scenario{{"planned (SIGTERM)", syscall.SIGTERM}, {"unplanned (SIGKILL)", syscall.SIGKILL}}

	env, err := binDir.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
	ctx := context.Background()

	fmt.Printf("failover of a 3-replica controller: from the signal to the leader to the first answer from the new leader,\n")
	fmt.Printf("for a client that resolves the Service's EndpointSlices and calls GET / every 10 ms; %d runs each\n\n", *runs)
	fmt.Printf("%-12s %-20s %-26s %5s %9s %9s %9s\n", "durations", "scenario", "implementation", "runs", "min", "p50", "max")

	type key struct{ d, s, i int }
	results := map[key][]time.Duration{}
	for di, d := range ds {
		fleets := make([]*fleet.Fleet, len(impls))
		for ii, im := range impls {
			ns := fmt.Sprintf("bench-%d-%d", di, ii)
			if err := env.CreateNamespace(ctx, ns, nil); err != nil {
				return err
			}
			f, err := fleet.New(env, im.binary, ns, "ctl", d)
			if err != nil {
				return err
			}
			f.Name = strings.Fields(im.name)[0]
			if err := f.CreateService(ctx, nil); err != nil {
				return err
			}
			if err := f.Add(3); err != nil {
				return err
			}
			if _, err := f.WaitServing(ctx, "", time.Minute); err != nil {
				return fmt.Errorf("%s: %w", im.name, err)
			}
			fleets[ii] = f
		}
		for si, sc := range scenarios {
			for r := range *runs {
				for k := range impls {
					ii := (k + r) % len(impls) // alternate who goes first
					took, err := measure(ctx, fleets[ii], sc.sig, d)
					if err != nil {
						return fmt.Errorf("%s, %s, %s, run %d: %w", d, sc.name, impls[ii].name, r+1, err)
					}
					results[key{di, si, ii}] = append(results[key{di, si, ii}], took)
				}
			}
			for ii, im := range impls {
				v := results[key{di, si, ii}]
				slices.Sort(v)
				fmt.Printf("%-12s %-20s %-26s %5d %9s %9s %9s\n", d, sc.name, im.name, len(v),
					benchstat.Round(v[0]), benchstat.Round(v[len(v)/2]), benchstat.Round(v[len(v)-1]))
			}
		}
		for _, f := range fleets {
			for _, r := range f.Replicas {
				r.Proc.Stop(syscall.SIGKILL, 0)
			}
		}
	}
	fmt.Println()
	for di, d := range ds {
		for si, sc := range scenarios {
			base, ours := results[key{di, si, 0}], results[key{di, si, 1}]
			b, o := base[len(base)/2], ours[len(ours)/2]
			extra := ""
			if sc.sig == syscall.SIGKILL {
				extra = fmt.Sprintf("; fastover p50 is the lease duration %+dms", (o - d.Lease).Milliseconds())
			}
			fmt.Printf("%-12s %-20s fastover p50 %9s vs client-go %9s: %.1fx faster%s\n",
				d, sc.name, benchstat.Round(o), benchstat.Round(b), float64(b)/float64(o), extra)
		}
	}
	return nil
}

// measure signals the fleet's leader and times the first answer from
// another replica; then it brings the signalled replica back as a standby.
func measure(ctx context.Context, f *fleet.Fleet, sig syscall.Signal, d fleet.Durations) (time.Duration, error) {
	old, err := f.WaitServing(ctx, "", 2*d.Lease+10*time.Second)
	if err != nil {
		return 0, err
	}
	r := f.ByID(old)
	if r == nil {
		return 0, fmt.Errorf("the Service answers from %q, not a replica", old)
	}
	if err := r.Proc.Signal(sig); err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := f.WaitServing(ctx, old, d.Lease+10*time.Second); err != nil {
		return 0, err
	}
	took := time.Since(start)
	if exited, _ := r.Proc.WaitExit(10 * time.Second); !exited {
		return 0, fmt.Errorf("%s still runs 10s after %v", old, sig)
	}
	if err := f.Start(r); err != nil {
		return 0, err
	}
	// Let the restarted replica settle as a standby (a client-go standby
	// only tries every retry period).
	time.Sleep(max(d.Retry, time.Second))
	return took, nil
}
