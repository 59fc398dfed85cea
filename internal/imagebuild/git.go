package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Describe reads the version, commit and commit time of the work tree at
// dir from git: the version is `git describe --tags --always --dirty`
// (v0.1.0 on a tagged commit; a dirty tree gives a version of its own, so
// that its images are never taken for the commit's).
func Describe(ctx context.Context, dir string) (version, commit string, at time.Time, err error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			msg := ""
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				msg = strings.TrimSpace(string(ee.Stderr))
			}
			return "", fmt.Errorf("git %s in %s: %w %s (set VERSION, COMMIT and COMMIT_TIME to build outside a git work tree)", strings.Join(args, " "), dir, err, msg)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if commit, err = git("rev-parse", "HEAD"); err != nil {
		return "", "", time.Time{}, err
	}
	ts, err := git("show", "-s", "--format=%ct", "HEAD")
	if err != nil {
		return "", "", time.Time{}, err
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", "", time.Time{}, fmt.Errorf("commit time %q: %w", ts, err)
	}
	if version, err = git("describe", "--tags", "--always", "--dirty"); err != nil {
		return "", "", time.Time{}, err
	}
	return version, commit, time.Unix(secs, 0).UTC(), nil
}
