package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fedcalib/fedcalib/infer/logits"
)

// The memory budget: the most memory one logits file may make a command
// hold, checked against what the file declares before anything is
// allocated (logits.Archive.SetMemoryBudget). It is the root's persistent
// flag --memory-budget, handed to the command through its context.

const memoryBudgetHelp = `the most memory one logits file may take once read, e.g. 8GiB or 512MiB; a file declaring more rows × classes is refused before it is read (--memory-budget raises the bound for larger files)`

// byteSize is a number of bytes given as 4GiB, 512MiB, 100MB or 123456.
// The zero value is 0 bytes.
type byteSize int64

var byteUnits = []struct {
	suffix string
	n      int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
}

// String formats the size with the largest binary unit dividing it.
func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d%s", n/u.n, u.suffix)
		}
	}
	return strconv.FormatInt(n, 10)
}

// Set parses a size > 0.
func (b *byteSize) Set(s string) error {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.n
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v > 0) || v*float64(mult) >= 1<<62 {
		return fmt.Errorf("want a size > 0 such as 8GiB, 512MiB or 1000000")
	}
	*b = byteSize(v * float64(mult))
	return nil
}

// Type names the flag's values in help texts.
func (b *byteSize) Type() string { return "size" }

// budgetKey is the context key of the memory budget.
type budgetKey struct{}

// registerMemoryBudget adds --memory-budget to root, for every command,
// and hands its value to the command run through its context.
func registerMemoryBudget(root *cobra.Command) {
	b := byteSize(logits.DefaultMemoryBudget)
	root.PersistentFlags().Var(&b, "memory-budget", memoryBudgetHelp)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		cmd.SetContext(context.WithValue(ctx, budgetKey{}, int64(b)))
		return nil
	}
}

// memoryBudget returns the memory budget handed to the command through
// ctx, or logits.DefaultMemoryBudget.
func memoryBudget(ctx context.Context) int64 {
	if ctx != nil {
		if b, ok := ctx.Value(budgetKey{}).(int64); ok && b > 0 {
			return b
		}
	}
	return logits.DefaultMemoryBudget
}
