package data

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLetterIndex(t *testing.T) {
	if n := utf8.RuneCountInString(ShakespeareLetters); n != 80 {
		t.Fatalf("vocabulary has %d letters, want 80", n)
	}
	for _, tc := range []struct {
		c    rune
		want int
	}{
		{'\n', 0}, {' ', 1}, {'!', 2}, {'"', 3}, {'.', 10}, {'0', 11}, {'5', 16}, {':', 21},
		{'?', 24}, {'A', 25}, {'Z', 50}, {'[', 51}, {']', 52}, {'a', 53}, {'z', 78}, {'}', 79},
		{'$', -1}, {'\t', -1}, {'é', -1}, {'{', -1}, {0, -1},
	} {
		if got := LetterIndex(tc.c); got != tc.want {
			t.Errorf("LetterIndex(%q) = %d, want %d", tc.c, got, tc.want)
		}
	}
	// Every letter maps back to itself.
	for i, c := range ShakespeareLetters {
		if LetterIndex(c) != i {
			t.Errorf("LetterIndex(%q) = %d, want %d", c, LetterIndex(c), i)
		}
	}
}

func TestLeafText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"a\nb", "a b"},
		{"a  \n  b", "a b"},
		{"\n\nx\n", " x "},
		{"tab\tstays", "tab\tstays"},
		{"é  è", "é è"},
	} {
		if got := string(leafText([]byte(tc.in), nil)); got != tc.want {
			t.Errorf("leafText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSpeakers(t *testing.T) {
	// testdata/speakers.txt cleaned by hand: the two roles' turns joined,
	// newlines and double spaces made single spaces. The preamble and the
	// "What say you:" line (no blank line before it) are not headings.
	const (
		citizen = "Before we proceed any further, hear me speak. What say you: We know't, we know't. $5"
		all     = "Speak, speak. Resolved. resolved. We are accounted poor citizens, the patricians good!"
	)
	if len(citizen) != 84 || len(all) != 86 {
		t.Fatal("bad hand-made texts")
	}
	want := []Record{
		{Text: citizen[0:80], Label: 10, Client: "First Citizen"}, // '.'
		{Text: citizen[1:81], Label: 1, Client: "First Citizen"},  // ' '
		// citizen[82] is '$', outside the vocabulary: window 2 is skipped.
		{Text: citizen[3:83], Label: 16, Client: "First Citizen"}, // '5'
		{Text: all[0:80], Label: 1, Client: "All"},                // ' '
		{Text: all[1:81], Label: 59, Client: "All"},               // 'g'
		{Text: all[2:82], Label: 67, Client: "All"},               // 'o'
		{Text: all[3:83], Label: 67, Client: "All"},               // 'o'
		{Text: all[4:84], Label: 56, Client: "All"},               // 'd'
		{Text: all[5:85], Label: 2, Client: "All"},                // '!'
	}
	for _, spec := range []string{"speakers:testdata/speakers.txt", "testdata/speakers.txt"} {
		got, classes := openAll(t, spec)
		for i := range got {
			got[i].Shape = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: records\n got %+v\nwant %+v", spec, got, want)
		}
		if !reflect.DeepEqual(classes, shakespeareClasses()) || classes[10] != "." {
			t.Errorf("%s: classes %q", spec, classes)
		}
	}
}

func TestSpeakersErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, msg string }{
		{"no heading", "just prose\nand more prose:\n", "no speaker headings"},
		{"empty", "", "no speaker headings"},
		{"lone colon", ":\nx\n", "no speaker headings"},
		{"gzip", gzipMagic + "rest", "a gzip file; decompress it"},
	} {
		_, err := newSpeakers(strings.NewReader(tc.text), int64(len(tc.text)), "play.txt")
		if err == nil || !strings.Contains(err.Error(), "play.txt: "+tc.msg) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, "play.txt: "+tc.msg)
		}
	}
	_, err := newSpeakers(strings.NewReader(""), 0, "play.txt")
	if !errors.Is(err, ErrFormat) {
		t.Errorf("error %v does not wrap ErrFormat", err)
	}
	if _, err := Open("speakers:testdata/none.txt"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
}

func TestSpeakersLongLinesAndCRLF(t *testing.T) {
	// A line longer than the scanner's buffer, and CRLF line ends.
	long := strings.Repeat("x", 100_000)
	text := "KING:\r\n" + long + "\r\ny\r\n"
	s, err := newSpeakers(strings.NewReader(text), int64(len(text)), "t")
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, &textReader{src: s})
	// The role's text is long + " y": len(long)+2 characters, so
	// len(long)+2-80 windows, all followed by letters or a space.
	if len(got) != len(long)+2-80 || got[0].Client != "KING" {
		t.Fatalf("%d records, client %q; want %d, KING", len(got), got[0].Client, len(long)+2-80)
	}
	last := got[len(got)-1]
	if last.Text != strings.Repeat("x", 79)+" " || last.Label != LetterIndex('y') {
		t.Errorf("last window %q label %d, want 79 x and a space, label of 'y'", last.Text, last.Label)
	}
}

func TestRoles(t *testing.T) {
	files := map[string][]byte{
		"by_play_and_character/THE_TEMPEST_ARIEL.txt":   []byte("All hail, great master! grave sir, hail! I come\nTo answer thy best pleasure;   be't to fly,\n"),
		"by_play_and_character/THE_TEMPEST_CALIBAN.txt": []byte("No more dams I'll make for fish\n"),
		"by_play_and_character/X_ACCENT.txt":            []byte(strings.Repeat("é", 80) + "a"),
		"users_and_plays.json":                          []byte(`{"THE_TEMPEST_ARIEL": "THE TEMPEST"}`),
	}
	names := []string{"users_and_plays.json", "by_play_and_character/THE_TEMPEST_ARIEL.txt",
		"by_play_and_character/THE_TEMPEST_CALIBAN.txt", "by_play_and_character/X_ACCENT.txt"}
	dir := t.TempDir()
	for _, n := range names {
		writeFile(t, dir, "raw/"+n, files[n])
	}
	archive := writeFile(t, dir, "roles.tar.gz", tarGz(t, names, files))

	// ARIEL's text cleaned by hand: 90 characters, so 10 windows.
	const ariel = "All hail, great master! grave sir, hail! I come To answer thy best pleasure; be't to fly, "
	var want []Record
	for i, c := range "t to fly, " { // ariel[80:]
		want = append(want, Record{Text: ariel[i : i+80], Label: LetterIndex(c), Client: "THE_TEMPEST_ARIEL"})
	}
	// CALIBAN has fewer than 81 characters. X_ACCENT has 80 two-byte
	// characters then 'a' (53): one window of 80 characters.
	want = append(want, Record{Text: strings.Repeat("é", 80), Label: 53, Client: "X_ACCENT"})
	for _, spec := range []string{"roles:" + dir + "/raw", "roles:" + archive} {
		got, classes := openAll(t, spec)
		for i := range got {
			got[i].Shape = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: records\n got %+v\nwant %+v", spec, got, want)
		}
		if len(classes) != 80 {
			t.Errorf("%s: %d classes", spec, len(classes))
		}
	}
	if want[0].Label != 72 || want[9].Label != 1 {
		t.Errorf("labels of 't' and ' ' = %d, %d; want 72, 1", want[0].Label, want[9].Label)
	}
	for _, tc := range []struct{ spec, msg string }{
		{"roles:" + dir + "/raw/users_and_plays.json", "roles wants a directory"},
		{"roles:" + t.TempDir(), "no role .txt files"},
	} {
		if _, err := Open(tc.spec); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Open(%q) error %v, want %q", tc.spec, err, tc.msg)
		}
	}
}
