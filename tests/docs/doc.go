// Package docs checks fastover's documentation against the repository:
// every Markdown file (README.md, docs/*.md, CONTRIBUTING.md, SECURITY.md,
// CHANGELOG.md, the READMEs of examples/ and charts/).
//
// Links: a relative link must name a file or directory that exists, and
// its #anchor a heading of that Markdown file; an absolute link into the
// repository (github.com/fastover/fastover/blob|tree/<ref>/<path>) must
// name a path that exists; other http(s) links are checked for syntax only
// (no network).
//
// Commands, in ```sh, ```bash, ```shell and ```console blocks (after the
// "$ " prompt) and in inline code that starts with make, go, kubectl,
// helm or one of fastover's binaries: make targets and the variables set
// for make exist in the Makefile; go build/run/test/vet/get packages exist
// and -run names a test of the package; kubectl -k and -f paths exist;
// helm charts exist and --set keys are values of the chart; the flags and
// subcommands given to fastover-webhook, fastover-certs, kubectl-fastover
// (also as `kubectl fastover`), fastover-example and fastover-demo exist
// in the binary built from this tree (its --help); scripts named by a
// path exist; any other command must be on a short list of known tools.
//
// Inline code: a path into one of the repository's top-level directories
// exists, a Test/Benchmark/Fuzz name is a function of the repository, and
// pkg.Name (pkg.Name.Member) is declared by fastover's package pkg. Inside
// the paragraph or table that follows <!-- docs: flags BINARY -->, every
// inline --flag is one of BINARY's.
//
// Go blocks compile against the tree (statements as the body of a function
// with ctx, t, clientset and runController in scope); YAML blocks parse.
//
// The tree (CheckTree): the repository tracks no built executable (ELF,
// Mach-O, PE), no file over MaxTrackedSize unless .gitattributes declares
// it test data (TestDataAttribute), and .gitignore covers the binary `go
// build` writes at the root for every main package.
package docs
