// Command apicost measures what leader election costs the API server, side
// by side in the same run: fastover's leader library (fastover-example)
// against client-go's tools/leaderelection with the same durations
// (leaderbaseline). For 3 and for 30 replicas of each, every replica talks
// to kube-apiserver through a proxy of its own that counts its requests by
// verb and resource and its watch streams (tests/harness/apicost); after a
// warm-up, the counts over a steady-state window give the leader's and the
// standbys' requests a minute. Both implementations run at once, in
// namespaces of their own, so that the machine's load hits both.
// `make bench` runs it on a local control plane (internal/cluster).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/tests/harness/apicost"
	"github.com/fastover/fastover/tests/harness/benchrun"
	"github.com/fastover/fastover/tests/harness/faultproxy"
)

func main() { benchrun.Main("apicost", run) }

type impl struct{ name, binary string }

func run() error {
	bin := benchrun.BinFlag("fastover-example and leaderbaseline")
	window := flag.Duration("window", 2*time.Minute, "steady-state window measured, per replica count")
	warmup := flag.Duration("warmup", 30*time.Second, "time after the Service answers from a leader before the window starts")
	counts := flag.String("replicas", "3,30", "replica counts, comma-separated")
	durations := flag.String("durations", "15s/10s/2s", "lease duration/renew deadline/retry period")
	controllers := flag.Int("controllers", 1000, "number of 3-replica controllers to extrapolate to")
	if err := benchrun.Parse(); err != nil {
		return err
	}
	if *window < 10*time.Second {
		return errors.New("-window must be at least 10s")
	}
	if *warmup < 0 {
		return errors.New("-warmup must not be negative")
	}
	var ns []int
	for _, s := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 || n > 200 {
			return fmt.Errorf("-replicas %q: want counts from 2 to 200, comma-separated", *counts)
		}
		ns = append(ns, n)
	}
	d, err := fleet.ParseDurations(*durations)
	if err != nil {
		return err
	}
	binDir, err := benchrun.Binaries(*bin, "leaderbaseline", "fastover-example")
	if err != nil {
		return err
	}
	impls := []impl{
		{"client-go", binDir.Path("leaderbaseline")},
		{"fastover", binDir.Path("fastover-example")},
	}

	env, err := binDir.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
	ctx := context.Background()

	fmt.Printf("API requests of leader election, durations %v: client-go's tools/leaderelection (leaderbaseline) vs fastover's leader (fastover-example),\n", d)
	fmt.Printf("counted at a proxy in front of kube-apiserver per replica, over a %v steady-state window after a %v warm-up;\n", *window, *warmup)
	fmt.Printf("requests/min leave watch opens out (they are counted apart); watches = streams a replica holds open at the window's end;\n")
	fmt.Printf("an informer's watch is re-opened every 5 to 10 minutes (client-go's reflector): a window shorter than that may see none\n\n")

	var results []*apicost.Result
	for _, n := range ns {
		var fleets []*apicost.Fleet
		stopAll := func() {
			for _, f := range fleets {
				f.Stop()
			}
		}
		for i, im := range impls {
			f, err := apicost.Start(ctx, env, im.name, im.binary, fmt.Sprintf("cost-%d-%d", n, i), n, d)
			if err != nil {
				stopAll()
				return err
			}
			fleets = append(fleets, f)
		}
		time.Sleep(*warmup)
		for _, f := range fleets {
			if err := f.Begin(ctx); err != nil {
				stopAll()
				return err
			}
		}
		time.Sleep(*window)
		for _, f := range fleets {
			r, err := f.End(ctx)
			if err != nil {
				stopAll()
				return fmt.Errorf("%d replicas: %w", n, err)
			}
			results = append(results, r)
		}
		stopAll()
	}

	fmt.Printf("%-10s %8s %14s %26s %16s %14s %14s\n", "impl", "replicas", "leader req/min", "standby req/min p50 (min-max)", "watches/replica", "watch opens/min", "fleet req/min")
	for _, r := range results {
		sb := r.StandbyPerMin()
		ow := r.OpenWatches()
		fmt.Printf("%-10s %8d %14.1f %26s %16s %14.1f %14.1f\n", r.Impl, r.Replicas, r.LeaderPerMin(),
			fmt.Sprintf("%.1f (%.1f-%.1f)", apicost.Median(sb), sb[0], sb[len(sb)-1]),
			fmt.Sprintf("%d (%d-%d)", ow[len(ow)/2], ow[0], ow[len(ow)-1]),
			r.WatchOpensPerMin(), r.TotalPerMin())
	}
	fmt.Printf("\nby verb and resource, a minute (watch = watch opens):\n")
	for _, r := range results {
		fmt.Printf("  %-10s %2d replicas  leader:       %s\n", r.Impl, r.Replicas, r.Breakdown([]faultproxy.Counts{r.LeaderCounts()}))
		fmt.Printf("  %-10s %2d replicas  mean standby: %s\n", r.Impl, r.Replicas, r.Breakdown(r.Standbys()))
	}
	byImpl := map[string]*apicost.Result{}
	for _, r := range results {
		if r.Replicas == 3 {
			byImpl[r.Impl] = r
		}
	}
	if cg, fo := byImpl["client-go"], byImpl["fastover"]; cg != nil && fo != nil {
		k := float64(*controllers)
		perS := func(r *apicost.Result) float64 { return k * r.TotalPerMin() / 60 }
		watches := func(r *apicost.Result) int {
			s := 0
			for _, w := range r.OpenWatches() {
				s += w
			}
			return s
		}
		fmt.Printf("\n%d HA controllers of 3 replicas each: client-go's leader election makes %.0f requests/s to the API server, fastover %.0f (%.1fx fewer);\n",
			*controllers, perS(cg), perS(fo), perS(cg)/max(perS(fo), 1e-9))
		fmt.Printf("standbys alone: client-go %.0f requests/s, fastover %.1f; fastover holds %d watch streams open (client-go %d)\n",
			k*2*apicost.Median(cg.StandbyPerMin())/60, k*2*apicost.Median(fo.StandbyPerMin())/60,
			*controllers*watches(fo), *controllers*watches(cg))
	}
	return nil
}
