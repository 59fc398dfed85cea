package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/internal/leaders"
)

// errAttention makes the command exit with exitNeedsFix: a leader has a
// problem an operator should look at.
var errAttention = errors.New("a leader needs attention")

func newLeadersCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "leaders",
		Short: "List the fastover leaders: holder, term, published endpoint, standbys, last handovers; exit 1 if one needs a look",
		Long: `leaders lists every Lease a fastover leader holds or held (recognised by what the
leader library writes: the leader.fastover.io/holder-pod annotation, an EndpointSlice
managed by leader.fastover.io naming the holder, or its Events on the Lease): the holder,
its term and since when, how the term began (planned, crash takeover, unplanned), the
Service the leader publishes and whether the published endpoint is the holder's, the
standbys (the holder Pod's siblings) with their readiness, and the last Events. It exits 1
when a leader has a problem: no leader, the endpoint not the holder's, the holder's Pod
gone or Terminating, no ready standby. It reads; it changes nothing.`,
		Example: `  kubectl fastover leaders                # the current namespace
  kubectl fastover leaders -n kube-system -o yaml
  kubectl fastover leaders -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.output {
			case "table", "json", "yaml":
			default:
				return fmt.Errorf("--output %q: want table, json or yaml", o.output)
			}
			cfg, err := o.config.ToRESTConfig()
			if err != nil {
				return err
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			namespace := ""
			if !o.allNamespaces {
				if namespace, _, err = o.config.ToRawKubeConfigLoader().Namespace(); err != nil {
					return err
				}
			}
			now := time.Now()
			list, err := leaders.List(cmd.Context(), client, namespace, now)
			if err != nil {
				return err
			}
			if err := printLeaders(cmd.OutOrStdout(), o.output, namespace, list, now); err != nil {
				return err
			}
			for _, l := range list {
				if len(l.Problems) > 0 {
					return errAttention
				}
			}
			return nil
		},
	}
}

// leadersReport is leaders' -o json / -o yaml document.
type leadersReport struct {
	Leaders []leaders.Leader `json:"leaders"`
}

func printLeaders(w io.Writer, format, namespace string, list []leaders.Leader, now time.Time) error {
	if format != "table" {
		if list == nil {
			list = []leaders.Leader{}
		}
		return encode(w, format, leadersReport{Leaders: list})
	}
	if len(list) == 0 {
		where := "namespace " + namespace
		if namespace == "" {
			where = "any namespace"
		}
		_, err := fmt.Fprintf(w, "No fastover leaders found in %s.\n", where)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAMESPACE\tLEASE\tHOLDER\tTERM\tSINCE\tHAND-OVER\tSERVICE\tPUBLISHED\tSTANDBYS\tLAST EVENT")
	for _, l := range list {
		holder := cmp.Or(l.Holder, "<none>")
		if l.Holder != "" && l.Expired {
			holder += " (expired)"
		}
		since := "-"
		if l.Since != nil && l.Holder != "" {
			since = duration.HumanDuration(now.Sub(*l.Since))
		}
		service, pub := "<none>", "-"
		if p := l.Published; p != nil {
			service = p.Service
			pub = "the holder"
			if !p.IsHolder {
				pub = fmt.Sprintf("%s (term %d)", p.Identity, p.Term)
			}
			if len(p.Addresses) > 0 {
				pub += " " + strings.Join(p.Addresses, ",")
			}
		}
		standbys := "-"
		if l.Standbys != nil {
			standbys = strconv.Itoa(l.ReadyStandbys()) + "/" + strconv.Itoa(len(l.Standbys)) + " ready"
		}
		last := "-"
		if n := len(l.Handovers); n > 0 {
			e := l.Handovers[n-1]
			last = e.Reason + ", " + duration.HumanDuration(now.Sub(e.Time)) + " ago"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n",
			l.Namespace, l.Lease, holder, l.Term, since, cmp.Or(l.HandOver, "-"), service, pub, standbys, last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range list {
		for _, p := range l.Problems {
			if _, err := fmt.Fprintf(w, "%s/%s: %s\n", l.Namespace, l.Lease, p); err != nil {
				return err
			}
		}
	}
	return nil
}
