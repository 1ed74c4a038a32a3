package cli

import "github.com/fedcalib/fedcalib/calib"

// classNames gathers the class names of the files a command reads — a
// logits file, calibrator files, a model's metadata — and checks that
// they agree. The zero value has no names yet.
type classNames struct {
	names []string // the first names added; nil while none
	from  string   // the file they came from
}

// add adds the names of the file from, which may be nil (it names no
// classes). It returns an error wrapping calib.ErrClassNames, naming both
// files and their first difference, when names differ from those added
// before.
func (c *classNames) add(from string, names []string) error {
	if err := calib.MatchClassNames(c.from, c.names, from, names); err != nil {
		return err
	}
	if len(c.names) == 0 && len(names) > 0 {
		c.names, c.from = names, from
	}
	return nil
}
