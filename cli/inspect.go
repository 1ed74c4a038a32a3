package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/onnx"
)

func newInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect MODEL.onnx",
		Short: "Show an ONNX model's inputs, outputs, opsets and metadata",
		Long: `inspect reads an ONNX model and prints its IR version, operator set
imports, producer, the graph inputs to feed (initializers left out) and the
outputs with their types and shapes, and its metadata_props in file order.
Symbolic dimensions print by name (batch), unknown ones as "?".

External data files are not read. A truncated or corrupt file gives one
error line saying what is wrong and at which byte.`,
		Example: `  fedcalib inspect model.onnx
  fedcalib inspect --json model.onnx | jq '.outputs[0].shape'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("inspect takes one MODEL.onnx argument, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := onnx.ReadFile(args[0])
			if err != nil {
				return err
			}
			r := newInspectReport(args[0], m)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return r.writeText(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text (shapes as arrays of numbers, names and nulls)")
	return cmd
}

// inspectReport is what inspect prints, and the schema of its JSON output.
type inspectReport struct {
	File            string       `json:"file"`
	IRVersion       int64        `json:"ir_version"`
	Opsets          []onnx.Opset `json:"opsets"` // the default domain as "ai.onnx"
	Producer        string       `json:"producer"`
	ProducerVersion string       `json:"producer_version"`
	Graph           string       `json:"graph"`
	Nodes           int          `json:"nodes"`
	Initializers    int          `json:"initializers"`
	Inputs          []onnx.Value `json:"inputs"`
	Outputs         []onnx.Value `json:"outputs"`
	Metadata        []onnx.Prop  `json:"metadata_props"`
}

func newInspectReport(file string, m *onnx.Model) *inspectReport {
	g := m.Proto().GetGraph()
	r := &inspectReport{
		File:         file,
		IRVersion:    m.IRVersion(),
		Opsets:       m.Opsets(),
		Graph:        g.GetName(),
		Nodes:        len(g.GetNode()),
		Initializers: len(g.GetInitializer()) + len(g.GetSparseInitializer()),
		Inputs:       m.Inputs(),
		Outputs:      m.Outputs(),
		Metadata:     m.Metadata(),
	}
	r.Producer, r.ProducerVersion = m.Producer()
	for i := range r.Opsets {
		if r.Opsets[i].Domain == "" {
			r.Opsets[i].Domain = "ai.onnx"
		}
	}
	// Print empty lists as [] in JSON.
	if r.Inputs == nil {
		r.Inputs = []onnx.Value{}
	}
	if r.Outputs == nil {
		r.Outputs = []onnx.Value{}
	}
	return r
}

// maxShownValue is the longest metadata value the text output prints whole.
const maxShownValue = 80

func (r *inspectReport) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	opsets := make([]string, len(r.Opsets))
	for i, o := range r.Opsets {
		opsets[i] = o.Domain + " " + strconv.FormatInt(o.Version, 10)
	}
	producer := strings.TrimSpace(r.Producer + " " + r.ProducerVersion)
	fmt.Fprintf(tw, "file:\t%s\n", r.File)
	fmt.Fprintf(tw, "IR version:\t%d\n", r.IRVersion)
	fmt.Fprintf(tw, "opsets:\t%s\n", orNone(strings.Join(opsets, ", ")))
	fmt.Fprintf(tw, "producer:\t%s\n", orNone(producer))
	fmt.Fprintf(tw, "graph:\t%s (%d nodes, %d initializers)\n", orNone(strconv.Quote(r.Graph)), r.Nodes, r.Initializers)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, sec := range []struct {
		name string
		vs   []onnx.Value
	}{{"inputs", r.Inputs}, {"outputs", r.Outputs}} {
		if len(sec.vs) == 0 {
			fmt.Fprintf(tw, "%s:\t(none)\n", sec.name)
			continue
		}
		fmt.Fprintf(tw, "%s:\n", sec.name)
		for _, v := range sec.vs {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", v.Name, orNone(v.Type), v.Shape)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Metadata) == 0 {
		fmt.Fprintf(tw, "metadata_props:\t(none)\n")
	} else {
		fmt.Fprintf(tw, "metadata_props:\n")
		for _, p := range r.Metadata {
			fmt.Fprintf(tw, "  %s\t%s\n", p.Key, shownValue(p.Value))
		}
	}
	return tw.Flush()
}

// shownValue quotes a metadata value that holds control characters and
// shortens a long one, so each entry stays on one line.
func shownValue(v string) string {
	n := len(v)
	if n > maxShownValue {
		cut := maxShownValue
		for cut > 0 && !isRuneStart(v[cut]) {
			cut--
		}
		v = v[:cut]
	}
	if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		v = strconv.Quote(v)
	}
	if n > maxShownValue {
		v += fmt.Sprintf("... (%d bytes; --json prints all)", n)
	}
	return v
}

func isRuneStart(b byte) bool { return b&0xc0 != 0x80 }

func orNone(s string) string {
	if s == "" || s == `""` {
		return "(none)"
	}
	return s
}
