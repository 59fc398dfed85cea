package main

import (
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/spf13/cobra"
	"sigs.k8s.io/kustomize/kyaml/kio"

	"github.com/fastover/fastover/internal/runwrap"
	"github.com/fastover/fastover/internal/version"
)

// releaseImage is fastover-run's image of the release this build is, or
// of the charts' appVersion for a build between releases.
func releaseImage() string {
	v := version.Get().Version
	if !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(v) {
		v = "v0.1.0"
	}
	return "ghcr.io/fastover/fastover-run:" + v
}

func newWrapCommand(o *options) *cobra.Command {
	opts := runwrap.ManifestOptions{Options: runwrap.Options{Image: releaseImage()}}
	var file string
	cmd := &cobra.Command{
		Use:   "wrap",
		Short: "Make the annotated Deployments of some manifests active/standby under fastover-run",
		Long: `wrap reads manifests (a YAML stream, or a KRM function's ResourceList) and writes them
back with every Deployment whose pod template is annotated fastover.io/run-lease made
active/standby under fastover-run, without a new image: an init container copies
fastover-run into an emptyDir, the container's command is put after it, the probes are
fastover-run's, the replicas are at least 2 (--replicas when fewer), the Service named by
fastover.io/run-service loses its selector, and a Role and RoleBinding
fastover-run-<lease> give the pod's ServiceAccount what fastover-run needs. Other objects
pass unchanged. It needs no cluster: use it as a Helm post-renderer, after kustomize
build, or as kustomize's exec KRM function (docs/run.md).`,
		Example: `  helm install my-op repo/my-op --post-renderer kubectl-fastover --post-renderer-args wrap
  kustomize build . | kubectl fastover wrap | kubectl apply -f -
  kubectl fastover wrap -f deployment.yaml --image=registry.example/fastover-run:v0.1.0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := cmd.InOrStdin()
			if file != "" && file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer func() { _ = f.Close() }()
				in = f
			}
			return wrapStream(in, cmd.OutOrStdout(), cmd.ErrOrStderr(), opts)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "-", "the manifests to read; - for standard input")
	cmd.Flags().StringVar(&opts.Image, "image", opts.Image, "fastover-run's image, run as the init container")
	cmd.Flags().Int32Var(&opts.Replicas, "replicas", 3, "replicas of a wrapped Deployment that has fewer than 2")
	return cmd
}

// wrapStream reads manifests from in and writes them, wrapped, to out,
// in the form they came (a stream or a ResourceList); what it did goes to
// log. On error nothing is written.
func wrapStream(in io.Reader, out, log io.Writer, opts runwrap.ManifestOptions) error {
	if opts.Replicas < 2 {
		return fmt.Errorf("--replicas=%d: want 2 or more (one replica has no standby)", opts.Replicas)
	}
	rw := &kio.ByteReadWriter{Reader: in, Writer: out, PreserveSeqIndent: true}
	nodes, err := rw.Read()
	if err != nil {
		return fmt.Errorf("reading the manifests: %w", err)
	}
	nodes, done, err := runwrap.Manifests(nodes, opts)
	if err != nil {
		return err
	}
	for _, w := range done {
		name := w.Name
		if w.Namespace != "" {
			name = w.Namespace + "/" + w.Name
		}
		msg := fmt.Sprintf("wrapped Deployment %s: Lease %s", name, w.Lease)
		switch {
		case w.Service == "":
			msg += ", election only (no fastover.io/run-service)"
		case w.ServiceFound:
			msg += fmt.Sprintf(", Service %s without its selector", w.Service)
		default:
			msg += fmt.Sprintf(", Service %s not in the manifests: create it without a selector", w.Service)
		}
		if w.RollingUpdate {
			msg += ", Recreate made a rolling update"
		}
		_, _ = fmt.Fprintln(log, msg)
	}
	return rw.Write(nodes)
}
