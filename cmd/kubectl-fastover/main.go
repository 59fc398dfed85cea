// Command kubectl-fastover is a kubectl plugin: with it on the PATH,
// `kubectl fastover audit` lists each pod's effective unreachable and
// not-ready tolerations and flags the pods that are not on fastover's fast
// path, and `kubectl fastover fix` patches those pods in place with the
// webhook's own rule.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/fastover/fastover/internal/version"
	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/toleration"
)

// Exit codes.
const (
	exitOK       = 0
	exitNeedsFix = 1 // audit found pods to fix; fix failed on some; leaders found a problem
	exitError    = 2
)

// errNeedsFix makes the command exit with exitNeedsFix, after its output.
var errNeedsFix = errors.New("pods need fixing")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := newRootCommand(stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errNeedsFix), errors.Is(err, errAttention):
		return exitNeedsFix
	default:
		_, _ = fmt.Fprintln(stderr, "error:", err)
		return exitError
	}
}

// options are the flags every subcommand shares.
type options struct {
	config        *genericclioptions.ConfigFlags
	allNamespaces bool
	output        string
	ruleConfig    string
	rule          toleration.Rule
	ruleFlags     *pflag.FlagSet // bound to rule
	ruleFrom      string         // where rule comes from, set by setup
	hazards       hazardFlags    // audit's
	// nsSelector is audit's and fix's --namespace-selector; summary is
	// audit's --summary.
	nsSelector string
	summary    bool

	// installation is the mode audit found.
	installation *retrofit.Installation
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	o := &options{config: genericclioptions.NewConfigFlags(true), rule: toleration.DefaultRule()}
	root := &cobra.Command{
		Use:   "kubectl-fastover",
		Short: "Find and fix pods that would wait 300 s on a lost node",
		Long: `kubectl fastover audits the pods of the namespaces labelled fastover.io/inject=enabled
(or of one namespace, or of all) for their effective node.kubernetes.io/unreachable and
not-ready NoExecute tolerations, and fixes in place, with the webhook's rule, the pods
that missed injection. The rule is the installed one: the ConfigMap
fastover-system/fastover-rule (--rule-config), which the webhook and the reconciler
read too; rule flags given here override it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String("kubectl-fastover"),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	o.addFlags(root.PersistentFlags())
	root.AddCommand(newAuditCommand(o), newFixCommand(o), newWrapCommand(o), newLeadersCommand(o))
	return root
}

// addFlags defines the flags every subcommand shares.
func (o *options) addFlags(flags *pflag.FlagSet) {
	o.config.AddFlags(flags)
	flags.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "audit every namespace (pods of namespaces that are not enabled are listed as out-of-scope)")
	flags.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	flags.StringVar(&o.ruleConfig, "rule-config", defaultRuleConfig,
		"the ConfigMap (namespace/name) that holds the rule audit and fix apply, as the webhook does; \"\" for the rule flags here alone")
	// The rule's flags, as the webhook's: given here, they override the
	// ConfigMap's.
	goFlags := flag.NewFlagSet("rule", flag.ContinueOnError)
	o.rule.AddFlags(goFlags)
	o.ruleFlags = pflag.NewFlagSet("rule", pflag.ContinueOnError)
	o.ruleFlags.AddGoFlagSet(goFlags)
	flags.AddFlagSet(o.ruleFlags)
}

// setup validates the shared flags and returns a client and the scope; it
// sets o.rule to the rule to apply (see resolveRule) and says on stderr
// which it is.
func (o *options) setup(cmd *cobra.Command) (kubernetes.Interface, retrofit.Scope, error) {
	if err := o.rule.Validate(); err != nil {
		return nil, retrofit.Scope{}, err
	}
	switch o.output {
	case "table", "json", "yaml":
	default:
		return nil, retrofit.Scope{}, fmt.Errorf("--output %q: want table, json or yaml", o.output)
	}
	var selector labels.Selector
	if o.nsSelector != "" {
		if o.config.Namespace != nil && *o.config.Namespace != "" {
			return nil, retrofit.Scope{}, fmt.Errorf("--namespace %q and --namespace-selector %q: give one", *o.config.Namespace, o.nsSelector)
		}
		var err error
		if selector, err = labels.Parse(o.nsSelector); err != nil {
			return nil, retrofit.Scope{}, fmt.Errorf("--namespace-selector %q: %w", o.nsSelector, err)
		}
	}
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, retrofit.Scope{}, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, retrofit.Scope{}, err
	}
	rule, from, err := o.resolveRule(cmd.Context(), client, cmd.Flags())
	if err != nil {
		return nil, retrofit.Scope{}, err
	}
	o.rule, o.ruleFrom = rule, from
	_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "rule: %s (from %s)\n", strings.Join(rule.Flags(), " "), from)
	scope := retrofit.Scope{AllNamespaces: o.allNamespaces}
	if !o.allNamespaces && o.config.Namespace != nil && *o.config.Namespace != "" {
		scope.Namespace = *o.config.Namespace
	}
	scope.NamespaceSelector = selector
	return client, scope, nil
}

// addScopeFlags defines the flags that pick namespaces by their labels
// (audit's and fix's).
func (o *options) addScopeFlags(flags *pflag.FlagSet) {
	flags.StringVar(&o.nsSelector, "namespace-selector", "",
		"the namespaces whose labels match this selector (kubectl's syntax, e.g. team=shop,env!=dev), enabled or not; not with -n")
}

func newAuditCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List pods' effective tolerations; exit 1 if some need fixing",
		Example: `  kubectl fastover audit                  # namespaces labelled fastover.io/inject=enabled
  kubectl fastover audit -n shop -o json
  kubectl fastover audit -A               # every namespace`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.hazards.validate(); err != nil {
				return err
			}
			client, scope, err := o.setup(cmd)
			if err != nil {
				return err
			}
			inst := installation(cmd.Context(), client, cmd.ErrOrStderr())
			o.installation = &inst
			a := retrofit.Auditor{Rule: o.rule, InstalledAt: inst.InstalledAt()}
			findings, err := a.Audit(cmd.Context(), client, scope)
			if err != nil {
				return err
			}
			if err := o.hazards.find(cmd.Context(), client, findings); err != nil {
				return err
			}
			if err := o.printFindings(cmd.OutOrStdout(), findings); err != nil {
				return err
			}
			if retrofit.NeedsFix(findings) > 0 {
				return errNeedsFix
			}
			return nil
		},
	}
	o.hazards.addFlags(cmd.Flags())
	o.addScopeFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.summary, "summary", false, "one line per namespace (its pods by status) instead of one per pod")
	return cmd
}

func newFixCommand(o *options) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "fix",
		Short: "Patch, in place, the pods that audit says need fixing",
		Long: `fix gives the pods that missed injection the webhook's toleration, in place: the
pods keep running (same UID). It never touches pods the rule leaves alone (opted out,
a toleration of the user's own, DaemonSet and mirror pods).`,
		Example: `  kubectl fastover fix --dry-run          # what would change (server-side dry run)
  kubectl fastover fix -n shop`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, scope, err := o.setup(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			a := retrofit.Auditor{Rule: o.rule, InstalledAt: installedAt(ctx, client, cmd.ErrOrStderr())}
			findings, err := a.Audit(ctx, client, scope)
			if err != nil {
				return err
			}
			fixer := retrofit.Fixer{Client: client, Rule: o.rule, DryRun: dryRun, FieldManager: "kubectl-fastover"}
			report := fix(ctx, fixer, findings)
			if err := report.print(cmd.OutOrStdout(), o.output, dryRun); err != nil {
				return err
			}
			if report.Failed > 0 {
				return errNeedsFix
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "send the patches as a server-side dry run: validated and admitted, not stored")
	o.addScopeFlags(cmd.Flags())
	return cmd
}

// fixReport is what fix did.
type fixReport struct {
	Fixed   []fixedPod `json:"fixed"`
	Failed  int        `json:"failed"`
	Errors  []string   `json:"errors,omitempty"`
	Kept    int        `json:"kept"`
	Fast    int        `json:"fast"`
	Gone    int        `json:"gone"`
	DryRun  bool       `json:"dryRun"`
	Skipped int        `json:"outOfScope"`
}

type fixedPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Before    string `json:"before"`
	Mark      string `json:"mark"`
	Reason    string `json:"reason"`
}

func fix(ctx context.Context, fixer retrofit.Fixer, findings []retrofit.Finding) fixReport {
	r := fixReport{DryRun: fixer.DryRun}
	for _, f := range findings {
		switch f.Status {
		case retrofit.StatusFast:
			r.Fast++
			continue
		case retrofit.StatusKept:
			r.Kept++
			continue
		case retrofit.StatusOutOfScope:
			r.Skipped++
			continue
		}
		res, err := fixer.Fix(ctx, f.Pod())
		switch {
		case err != nil:
			r.Failed++
			r.Errors = append(r.Errors, err.Error())
		case res.Gone:
			r.Gone++
		case res.Patched:
			r.Fixed = append(r.Fixed, fixedPod{
				Namespace: f.Namespace, Name: f.Name, UID: f.UID,
				Before: f.Unreachable.String(), Mark: res.Mark, Reason: f.Reason,
			})
		default:
			r.Fast++ // fixed meanwhile, by the reconciler or someone else
		}
	}
	return r
}

func (r fixReport) print(w io.Writer, format string, dryRun bool) error {
	if format != "table" {
		return encode(w, format, r)
	}
	verb := "fixed"
	if dryRun {
		verb = "would fix (dry run)"
	}
	for _, p := range r.Fixed {
		_, _ = fmt.Fprintf(w, "%s pod %s/%s: unreachable %s -> %s (%s)\n", verb, p.Namespace, p.Name, p.Before, p.Mark, p.Reason)
	}
	for _, e := range r.Errors {
		_, _ = fmt.Fprintf(w, "failed: %s\n", e)
	}
	_, err := fmt.Fprintf(w, "%s %d pods; %d failed; left alone: %d already fast, %d kept by the rule, %d out of scope, %d gone\n",
		verb, len(r.Fixed), r.Failed, r.Fast, r.Kept, r.Skipped, r.Gone)
	return err
}

// auditReport is audit's -o json / -o yaml document.
type auditReport struct {
	Pods    []retrofit.Finding `json:"pods"`
	Summary map[string]int     `json:"summary"`
	// Namespaces counts the pods of each namespace by status.
	Namespaces []retrofit.NamespaceSummary `json:"namespaces"`
	// Rule is the rule applied, as the webhook's flags; RuleFrom says
	// where it was read.
	Rule     []string `json:"rule"`
	RuleFrom string   `json:"ruleFrom"`
	// Installation is the mode found: webhook, policy, both or none.
	Installation *retrofit.Installation `json:"installation,omitempty"`
	// Hazards are the pods the toleration does not bring back by itself,
	// and the zones.
	Hazards *retrofit.HazardReport `json:"hazards,omitempty"`
	// NodeLoss is the node loss model's prediction for the nodes not
	// Ready now, or for --lose's.
	NodeLoss *retrofit.LossPrediction `json:"nodeLoss,omitempty"`
}

func (o *options) printFindings(w io.Writer, findings []retrofit.Finding) error {
	format := o.output
	counts := map[string]int{}
	for _, f := range findings {
		counts[string(f.Status)]++
	}
	if format != "table" {
		if findings == nil {
			findings = []retrofit.Finding{}
		}
		byNamespace := retrofit.Summarize(findings)
		if byNamespace == nil {
			byNamespace = []retrofit.NamespaceSummary{}
		}
		return encode(w, format, auditReport{Pods: findings, Summary: counts, Namespaces: byNamespace, Rule: o.rule.Flags(), RuleFrom: o.ruleFrom, Installation: o.installation, Hazards: o.hazards.report, NodeLoss: o.hazards.prediction})
	}
	if err := printInstallation(w, o.installation); err != nil {
		return err
	}
	if len(findings) == 0 {
		msg := "No pods found in namespaces labelled fastover.io/inject=enabled."
		if o.nsSelector != "" {
			msg = fmt.Sprintf("No pods found in namespaces matching %q.", o.nsSelector)
		}
		if _, err := fmt.Fprintln(w, msg); err != nil {
			return err
		}
		return printLoss(w, o.hazards.prediction, o.hazards.model)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if o.summary {
		_, _ = fmt.Fprintln(tw, "NAMESPACE\tPODS\tFAST\tNEED FIXING\tKEPT\tOUT OF SCOPE")
		for _, s := range retrofit.Summarize(findings) {
			_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", s.Namespace, s.Pods, s.Fast, s.NeedsFix, s.Kept, s.OutOfScope)
		}
	} else {
		_, _ = fmt.Fprintln(tw, "NAMESPACE\tPOD\tNODE\tUNREACHABLE\tNOT-READY\tSTATUS\tREASON")
		for _, f := range findings {
			node := f.Node
			if node == "" {
				node = "<none>"
			}
			_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Namespace, f.Name, node, f.Unreachable, f.NotReady, f.Status, f.Reason)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d pods: %d fast, %d need fixing, %d kept by the rule, %d out of scope.\n",
		len(findings), counts[string(retrofit.StatusFast)], counts[string(retrofit.StatusNeedsFix)],
		counts[string(retrofit.StatusKept)], counts[string(retrofit.StatusOutOfScope)])
	if err == nil && counts[string(retrofit.StatusNeedsFix)] > 0 {
		_, err = fmt.Fprintln(w, "Run `kubectl fastover fix` to fix them in place (`--dry-run` first to see).")
	}
	if err != nil {
		return err
	}
	if err := printHazards(w, o.hazards.report, o.hazards.th); err != nil {
		return err
	}
	return printLoss(w, o.hazards.prediction, o.hazards.model)
}

func encode(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}
