package infer

import "strings"

// JoinClassNames returns the fedcalib.classes metadata value of names,
// which SplitClassNames turns back into names, and true; or "" and false
// when no such value exists: no names, or a name that holds a comma or
// begins or ends with a space.
func JoinClassNames(names []string) (string, bool) {
	if len(names) == 0 {
		return "", false
	}
	for _, s := range names {
		if s == "" || strings.Contains(s, ",") || strings.TrimSpace(s) != s {
			return "", false
		}
	}
	return strings.Join(names, ","), true
}
