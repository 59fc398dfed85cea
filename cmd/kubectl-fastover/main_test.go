package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBadInputIsAClearError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "-o", "xml"}, `--output "xml": want table, json or yaml`},
		{[]string{"audit", "--toleration-seconds=-1"}, "tolerationSeconds: must not be negative, got -1"},
		{[]string{"fix", "--not-ready-toleration-seconds=soon"}, `want a non-negative integer, got "soon"`},
		{[]string{"audit", "extra"}, `unknown command "extra"`},
		{[]string{"repair"}, `unknown command "repair"`},
		{[]string{"audit", "-n", "shop", "--namespace-selector", "team=a"}, `--namespace "shop" and --namespace-selector "team=a": give one`},
		{[]string{"fix", "--namespace-selector", "team in (a"}, `--namespace-selector "team in (a":`},
		{[]string{"leaders", "--namespace-selector", "team=a"}, `unknown flag: --namespace-selector`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		assert.Equal(t, exitError, code, tc.args)
		assert.Contains(t, stderr.String(), tc.want, tc.args)
	}
}

func TestHelpNamesTheSubcommands(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitOK, run(context.Background(), []string{"--help"}, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "audit")
	assert.Contains(t, stdout.String(), "fix")
}
