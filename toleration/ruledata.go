package toleration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The rule's keys in the ConfigMap fastover-rule: one key per field, each
// a whole number of seconds written as decimal digits. Flat keys, so that
// both readers read the same object: the webhook and the reconciler the
// files the ConfigMap is mounted as (RuleFile is the directory), and the
// MutatingAdmissionPolicy of policy mode (manifests/policy) its data
// through paramRef, in CEL, which reads no YAML.
const (
	RuleKeyTolerationSeconds         = "tolerationSeconds"
	RuleKeyNotReadyTolerationSeconds = "notReadyTolerationSeconds"
	RuleKeyDefaultTolerationSeconds  = "defaultTolerationSeconds"
)

// RuleKeys are the ConfigMap's keys, in the order of the documentation.
func RuleKeys() []string {
	return []string{RuleKeyTolerationSeconds, RuleKeyNotReadyTolerationSeconds, RuleKeyDefaultTolerationSeconds}
}

// ruleValue is what a key's value must be: the same pattern the
// policy's CEL checks ('^[0-9]{1,15}$'), so that the two read the same
// values the same way.
var ruleValue = regexp.MustCompile(`^[0-9]{1,` + strconv.Itoa(maxSecondsDigits) + `}$`)

// legacyRuleKey is the key that held the whole rule as YAML before the
// rule's fields became keys of their own.
const legacyRuleKey = "rule.yaml"

// ParseRuleData reads the rule from the ConfigMap fastover-rule's data:
//
//	data:
//	  tolerationSeconds: "0"
//	  notReadyTolerationSeconds: "30"   # optional: absent leaves not-ready alone
//	  defaultTolerationSeconds: "300"
//
// It is strict: an unknown key, or a value that is not decimal digits (at
// most 18: no sign, no space, no unit), is an error naming the key, and
// every such problem is reported at once. Absent keys take DefaultRule's
// values.
func ParseRuleData(data map[string]string) (Rule, error) {
	var errs []error
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	known := RuleKeys()
	for _, k := range keys {
		switch {
		case k == legacyRuleKey:
			errs = append(errs, fmt.Errorf("key %s: the rule is no longer one YAML document; give each field as a key of its own (%s)",
				legacyRuleKey, strings.Join(known, ", ")))
		case !slices.Contains(known, k):
			errs = append(errs, fmt.Errorf("unknown key %q: want %s", k, strings.Join(known, ", ")))
		}
	}
	r := DefaultRule()
	for _, k := range known {
		v, ok := data[k]
		if !ok {
			continue
		}
		if !ruleValue.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s: want a whole number of seconds, decimal digits only (at most %d), got %q", k, maxSecondsDigits, v))
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil { // cannot happen with at most 15 digits
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
			continue
		}
		switch k {
		case RuleKeyTolerationSeconds:
			r.TolerationSeconds = n
		case RuleKeyNotReadyTolerationSeconds:
			r.NotReadyTolerationSeconds = &n
		case RuleKeyDefaultTolerationSeconds:
			r.DefaultTolerationSeconds = n
		}
	}
	if len(errs) > 0 {
		return Rule{}, errors.Join(errs...)
	}
	return r, r.Validate()
}

// MarshalRuleData writes r as the ConfigMap's data, every field given
// (notReadyTolerationSeconds only when r manages not-ready).
func MarshalRuleData(r Rule) (map[string]string, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	data := map[string]string{
		RuleKeyTolerationSeconds:        strconv.FormatInt(r.TolerationSeconds, 10),
		RuleKeyDefaultTolerationSeconds: strconv.FormatInt(r.DefaultTolerationSeconds, 10),
	}
	if r.NotReadyTolerationSeconds != nil {
		data[RuleKeyNotReadyTolerationSeconds] = strconv.FormatInt(*r.NotReadyTolerationSeconds, 10)
	}
	return data, nil
}

// readRuleSource reads the rule at path: a directory is the ConfigMap as
// the kubelet mounts it (a file per key; hidden entries such as ..data
// are the kubelet's), read by ParseRuleData; a file is a rule in the
// format of ParseRuleConfig. It returns the content read (to tell a
// change), and the rule, or the error of reading or parsing it.
func readRuleSource(path string) (content []byte, r Rule, readErr, parseErr error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, Rule{}, err, nil
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, Rule{}, err, nil
		}
		r, err := ParseRuleConfig(data)
		return data, r, nil, err
	}
	data, content, err := readKubeletDir(path)
	if err != nil {
		return nil, Rule{}, err, nil
	}
	r, err = ParseRuleData(data)
	return content, r, nil, err
}

// readKubeletDir reads the files of a ConfigMap volume: its keys and
// values, and the content read (to tell a change). The kubelet writes each
// version into a hidden directory, swaps the symlink ..data to it, then
// removes the previous one: the version ..data names is read, and read
// again if ..data moved on meanwhile (the version read may have been
// removed under the reader), so that one whole version is read, never a
// mix or a part. A directory without ..data is read as it is.
func readKubeletDir(path string) (map[string]string, []byte, error) {
	link := filepath.Join(path, "..data")
	var err error
	for range 5 {
		before, lerr := os.Readlink(link)
		if lerr != nil {
			return readDir(path)
		}
		dir := before
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(path, dir)
		}
		var data map[string]string
		var content []byte
		data, content, err = readDir(dir)
		if after, _ := os.Readlink(link); after == before {
			return data, content, err
		}
	}
	if err == nil {
		err = fmt.Errorf("%s: the kubelet swapped its version five times while it was read", path)
	}
	return nil, nil, err
}

// readDir reads each file of dir that is not hidden.
func readDir(dir string) (map[string]string, []byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	data := map[string]string{}
	var b strings.Builder
	for _, e := range entries { // sorted by name
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		v, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		data[e.Name()] = string(v)
		fmt.Fprintf(&b, "%q=%q\n", e.Name(), v)
	}
	return data, []byte(b.String()), nil
}
