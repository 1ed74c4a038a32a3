package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fedcalib/fedcalib/infer"
)

// preprocessFlags are the flags that give a model's preprocessing: a preset
// (--preprocess), a Hugging Face or timm config (--preprocess-config), and
// one flag per inferOverrides key overriding either, key by key. infer
// runs a model with them; export writes them into the calibrated model.
type preprocessFlags struct {
	preset, config string
	values         []string // one per inferOverrides entry
	classes        bool     // whether --classes is among them
}

// register adds the flags to f; verb says what the command does with the
// keys ("overrides" for infer, "written as" for export), and classes
// whether --classes (fedcalib.classes) is one of them.
func (p *preprocessFlags) register(f *pflag.FlagSet, verb string, classes bool) {
	p.classes = classes
	p.values = make([]string, len(inferOverrides))
	f.StringVar(&p.preset, "preprocess", "", "a preprocessing preset in place of the model's metadata: "+strings.Join(infer.PresetNames(), ", ")+" (e.g. --preprocess imagenet); the flags below override it")
	f.StringVar(&p.config, "preprocess-config", "", "take the preprocessing from a Hugging Face preprocessor_config.json or a timm pretrained_cfg JSON (e.g. --preprocess-config preprocessor_config.json); the flags below override it")
	for i, o := range inferOverrides {
		if o.key == infer.KeyClasses && !classes {
			continue
		}
		f.StringVar(&p.values[i], o.flag, "", o.usage+" ("+verb+" "+o.key+")")
	}
}

// resolve returns the metadata keys the flags of cmd give (an empty map
// when none was given), checking each value as infer parses it.
func (p *preprocessFlags) resolve(cmd *cobra.Command) (map[string]string, error) {
	keys := map[string]string{}
	var err error
	switch {
	case p.preset != "" && p.config != "":
		return nil, fmt.Errorf("--preprocess and --preprocess-config both give the preprocessing: pass one")
	case p.preset != "":
		if keys, err = infer.Preset(p.preset); err != nil {
			return nil, fmt.Errorf("--preprocess: %w", err)
		}
	case p.config != "":
		if keys, err = infer.ReadConfig(p.config); err != nil {
			return nil, fmt.Errorf("--preprocess-config: %w", err)
		}
	}
	for i, o := range inferOverrides {
		if (o.key == infer.KeyClasses && !p.classes) || !cmd.Flags().Changed(o.flag) {
			continue
		}
		if o.key != infer.KeyVocab && o.key != infer.KeyClasses {
			if _, err := infer.ParsePreprocessing(map[string]string{o.key: p.values[i]}); err != nil {
				return nil, fmt.Errorf("--%s: %w", o.flag, err)
			}
		}
		keys[o.key] = p.values[i]
	}
	return keys, nil
}
