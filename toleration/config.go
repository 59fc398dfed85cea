package toleration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"reflect"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The rule's published home: the ConfigMap fastover installs in the
// webhook's namespace, one key per field of the rule (ParseRuleData). The
// webhook and the reconciler read it as the directory the ConfigMap is
// mounted as (RuleFile, --rule-file in the manifests); kubectl-fastover
// and the MutatingAdmissionPolicy of policy mode read it through the API.
// It is the rule's contract: the rule flags of a process override it for
// that process only.
const (
	// RuleConfigMapNamespace and RuleConfigMapName name the ConfigMap.
	RuleConfigMapNamespace = "fastover-system"
	RuleConfigMapName      = "fastover-rule"
	// RuleFile is where the manifests mount the ConfigMap in the webhook's
	// and the reconciler's containers (fastover-webhook --rule-file): a
	// directory with a file per key.
	RuleFile = "/etc/fastover/rule"
)

// The rule's format: its apiVersion and kind.
const (
	RuleAPIVersion = "fastover.io/v1alpha1"
	RuleKind       = "Rule"
)

// ruleConfig is the rule's format. Absent fields take DefaultRule's
// values.
type ruleConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// TolerationSeconds is Rule.TolerationSeconds.
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
	// NotReadyTolerationSeconds is Rule.NotReadyTolerationSeconds: absent
	// (or null) leaves not-ready alone.
	NotReadyTolerationSeconds *int64 `json:"notReadyTolerationSeconds,omitempty"`
	// DefaultTolerationSeconds is Rule.DefaultTolerationSeconds.
	DefaultTolerationSeconds *int64 `json:"defaultTolerationSeconds,omitempty"`
}

// ParseRuleConfig reads a rule file in fastover's format, YAML or JSON,
// for a process given --rule-file outside the cluster (in the cluster the
// rule is the ConfigMap's keys, ParseRuleData):
//
//	apiVersion: fastover.io/v1alpha1
//	kind: Rule
//	tolerationSeconds: 0
//	notReadyTolerationSeconds: 30   # optional: absent leaves not-ready alone
//	defaultTolerationSeconds: 300
//
// It is strict: an unknown or repeated field, another apiVersion or kind,
// a value that is not an integer, or a negative one is an error naming
// the field, and every such problem is reported at once. Absent fields
// take DefaultRule's values.
func ParseRuleConfig(data []byte) (Rule, error) {
	doc, err := oneDocument(data)
	if err != nil {
		return Rule{}, err
	}
	var c ruleConfig
	// Field names match exactly (no case folding), as in Kubernetes
	// objects; unknown ones are errors.
	if err := json.Unmarshal(doc, &c, json.RejectUnknownMembers(true)); err != nil {
		return Rule{}, fmt.Errorf("the rule does not parse: %s", cleanJSONError(err))
	}
	var errs []error
	if c.APIVersion != RuleAPIVersion {
		errs = append(errs, fmt.Errorf("apiVersion: want %s, got %q", RuleAPIVersion, c.APIVersion))
	}
	if c.Kind != RuleKind {
		errs = append(errs, fmt.Errorf("kind: want %s, got %q", RuleKind, c.Kind))
	}
	r := DefaultRule()
	for _, f := range []struct {
		name string
		v    *int64
		to   *int64
	}{
		{"tolerationSeconds", c.TolerationSeconds, &r.TolerationSeconds},
		{"notReadyTolerationSeconds", c.NotReadyTolerationSeconds, nil},
		{"defaultTolerationSeconds", c.DefaultTolerationSeconds, &r.DefaultTolerationSeconds},
	} {
		switch {
		case f.v == nil:
		case *f.v < 0:
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %d", f.name, *f.v))
		case f.to != nil:
			*f.to = *f.v
		}
	}
	if v := c.NotReadyTolerationSeconds; v != nil && *v >= 0 {
		r.NotReadyTolerationSeconds = v
	}
	if len(errs) > 0 {
		return Rule{}, errors.Join(errs...)
	}
	return r, r.Validate()
}

// oneDocument returns the rule's one YAML document as JSON. Repeated
// keys, and more than one document, are errors.
func oneDocument(data []byte) ([]byte, error) {
	var doc []byte
	docs := 0
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the rule does not parse: %w", err)
		}
		j, err := yaml.YAMLToJSONStrict(d)
		if err != nil {
			return nil, fmt.Errorf("the rule does not parse: %s", strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "))
		}
		if string(bytes.TrimSpace(j)) == "null" {
			continue // only comments, or nothing
		}
		doc = j
		docs++
	}
	switch docs {
	case 0:
		return nil, fmt.Errorf("the rule is empty: want at least apiVersion: %s and kind: %s", RuleAPIVersion, RuleKind)
	case 1:
		return doc, nil
	default:
		return nil, fmt.Errorf("the rule holds %d YAML documents: want one", docs)
	}
}

// cleanJSONError says what the decoder's error says, naming the field by
// its name in the rule rather than the Go type's.
func cleanJSONError(err error) string {
	var se *json.SemanticError
	if !errors.As(err, &se) {
		return err.Error()
	}
	field := strings.TrimPrefix(string(se.JSONPointer), "/")
	switch {
	case field == "":
		return fmt.Sprintf("want a mapping of fields, got %s", got(se))
	case errors.Is(err, json.ErrUnknownName):
		return fmt.Sprintf("unknown field %q", field)
	case se.GoType != nil && se.GoType.Kind() == reflect.String:
		return fmt.Sprintf("%s: want a string, got %s", field, got(se))
	default:
		return fmt.Sprintf("%s: want a whole number of seconds (an integer up to 2^63-1), got %s", field, got(se))
	}
}

// got names the value that did not fit as a YAML user knows it: the
// value itself for a number or a string, else its kind.
func got(se *json.SemanticError) string {
	switch k := se.JSONKind; {
	case len(se.JSONValue) > 0 && len(se.JSONValue) <= 40 && (k == '"' || k == '0'):
		return string(se.JSONValue)
	case k == '"':
		return "a string"
	case k == '0':
		return "a number that does not fit"
	case k == '[':
		return "a list"
	case k == '{':
		return "a mapping"
	case k == 't', k == 'f':
		return "a boolean"
	}
	return "another kind of value"
}

// MarshalRuleConfig writes r in the format of ParseRuleConfig, in the
// order of the documentation, every field given (notReadyTolerationSeconds
// only when r manages not-ready).
func MarshalRuleConfig(r Rule) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\ntolerationSeconds: %d\n", RuleAPIVersion, RuleKind, r.TolerationSeconds)
	if r.NotReadyTolerationSeconds != nil {
		fmt.Fprintf(&b, "notReadyTolerationSeconds: %d\n", *r.NotReadyTolerationSeconds)
	}
	fmt.Fprintf(&b, "defaultTolerationSeconds: %d\n", r.DefaultTolerationSeconds)
	return []byte(b.String()), nil
}

// LoadRuleFile reads and parses the rule at path: the directory the
// ConfigMap fastover-rule is mounted as (its keys, ParseRuleData), or a
// rule file (ParseRuleConfig). Errors name the path.
func LoadRuleFile(path string) (Rule, error) {
	r, _, err := loadRuleFile(path)
	return r, err
}

func loadRuleFile(path string) (Rule, []byte, error) {
	content, r, readErr, parseErr := readRuleSource(path)
	if readErr != nil {
		return Rule{}, nil, fmt.Errorf("rule file: %w", readErr)
	}
	if parseErr != nil {
		return Rule{}, content, fmt.Errorf("rule file %s: %w", path, parseErr)
	}
	return r, content, nil
}

// WithFlags returns r with each rule flag (see AddFlags) that given
// reports as set on the command line taken from flags, the rule those
// flags were bound to: a flag given explicitly wins over the rule file,
// for that process only. given is, for example, a pflag.FlagSet's Changed,
// or a lookup in the names flag.FlagSet.Visit reports.
func (r Rule) WithFlags(flags Rule, given func(name string) bool) Rule {
	if given("toleration-seconds") {
		r.TolerationSeconds = flags.TolerationSeconds
	}
	if given("not-ready-toleration-seconds") && flags.NotReadyTolerationSeconds != nil {
		v := *flags.NotReadyTolerationSeconds
		r.NotReadyTolerationSeconds = &v
	}
	if given("default-toleration-seconds") {
		r.DefaultTolerationSeconds = flags.DefaultTolerationSeconds
	}
	return r
}

// DefaultRuleFileInterval is how often a RuleWatcher reads its file.
const DefaultRuleFileInterval = 2 * time.Second

// RuleWatcher keeps a rule file's rule current, without a restart: the
// directory of the ConfigMap fastover-rule, or a rule file.
//
// It polls: every Interval it reads the files (a few hundred bytes) and,
// when the content differs from the last read, parses it. The kubelet
// updates a ConfigMap volume by writing a new timestamped directory and
// swapping the ..data symlink to it; reading the file by its path always
// follows the symlink to a complete version, so polling needs no notion
// of those events and cannot miss one (an inotify watch on the directory
// would have to re-resolve the symlink after each swap, and inotify
// watches are a per-user limited resource). The kubelet itself brings a
// ConfigMap change to the volume up to a minute or so after the API
// change; a 2 s poll adds little to that.
type RuleWatcher struct {
	// Path is the rule file.
	Path string
	// Interval between reads; DefaultRuleFileInterval if zero.
	Interval time.Duration
	// Changed is called with the rule whenever the file's content
	// changes and parses (not for the first read, Load's).
	Changed func(Rule)
	// Failed is called when the file's content changes and does not
	// parse, or when the file cannot be read (once until it can again):
	// the last good rule stays in force.
	Failed func(error)

	last    []byte // content last read, good or bad
	lastErr string // the read error last reported (readErrKey)
}

// Load reads the file the first time: its rule, or an error (at start-up,
// a missing or bad file is fatal).
func (w *RuleWatcher) Load() (Rule, error) {
	r, data, err := loadRuleFile(w.Path)
	if err != nil {
		return Rule{}, err
	}
	w.last = data
	return r, nil
}

// Watch reads the file every Interval until ctx ends, calling Changed or
// Failed as the content changes. Call Load first.
func (w *RuleWatcher) Watch(ctx context.Context) {
	interval := w.Interval
	if interval <= 0 {
		interval = DefaultRuleFileInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.check()
		}
	}
}

// check reads the file once and reports a change.
func (w *RuleWatcher) check() {
	data, r, err, parseErr := readRuleSource(w.Path)
	if err != nil {
		if key := readErrKey(err); key != w.lastErr {
			w.lastErr = key
			w.fail(fmt.Errorf("rule file: %w (the last good rule stays in force)", err))
		}
		return
	}
	w.lastErr = ""
	if bytes.Equal(data, w.last) {
		return
	}
	w.last = data
	if parseErr != nil {
		w.fail(fmt.Errorf("rule file %s: %w (the last good rule stays in force)", w.Path, parseErr))
		return
	}
	if w.Changed != nil {
		w.Changed(r)
	}
}

// readErrKey is what tells one read error from the next: a missing file
// or directory is one condition however the read found it (a stat, an
// open, a link whose target went), so it is reported once; any other error
// by its message.
func readErrKey(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "not exist"
	}
	return err.Error()
}

func (w *RuleWatcher) fail(err error) {
	if w.Failed != nil {
		w.Failed(err)
	}
}
