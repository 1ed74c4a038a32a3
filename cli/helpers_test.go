package cli

import "bytes"

// fedcalib runs the command line in-process, as the binary would with
// args, and returns its exit status and output: the one runner of the cli
// tests.
func fedcalib(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return code, o.String(), e.String()
}
