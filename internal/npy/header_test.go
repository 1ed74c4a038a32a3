package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestParseHeader(t *testing.T) {
	for _, tc := range []struct {
		dict string
		want Header
		err  string
	}{
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }   \n", Header{"<f4", false, []int{3, 2}}, ""},
		{`{"shape": (5,), "fortran_order": True, "descr": ">i8"}`, Header{">i8", true, []int{5}}, ""},
		{"{'descr':'|u1','fortran_order':False,'shape':()}\n", Header{"|u1", false, []int{}}, ""},
		{"{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 3L), }\n", Header{"<f8", false, []int{2, 3}}, ""},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }\x00\x00", Header{"<f4", false, []int{3, 2}}, ""},
		{"", Header{}, "does not start with '{'"},
		{"{'descr': '<f4', 'shape': (3,)}", Header{}, `no "fortran_order" key`},
		{"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", Header{}, `key "descr" repeated`},
		{"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}", Header{}, "structured dtypes"},
		{"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,)}", Header{}, "want True or False"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}", Header{}, "non-negative integer"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (3 2)}", Header{}, "want ',' or ')'"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': 3}", Header{}, "want a tuple"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", Header{}, "out of range"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", Header{}, `unknown key "x"`},
		{"{'descr' '<f4'}", Header{}, "no ':' after key"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x", Header{}, "text after '}'"},
		{"{'descr': 'a\\'b', 'fortran_order': False, 'shape': (3,)}", Header{}, "escapes"},
		{"{'descr", Header{}, "unterminated string"},
		{"{'descr': '<f4' 'fortran_order': False}", Header{}, `no ',' or '}' after "descr"`},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (" + strings.Repeat("1,", MaxDims+1) + ")}", Header{}, "more than 64 dimensions"},
	} {
		got, err := ParseHeader(tc.dict)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseHeader(%q) error %v, want one containing %q", tc.dict, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseHeader(%q) = %+v, %v; want %+v", tc.dict, got, err, tc.want)
		}
	}
}

// TestReadHeader reads headers of each format version that NumPy
// writes, and refuses streams that are not .npy or end early.
func TestReadHeader(t *testing.T) {
	dict := "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }      \n"
	v1 := append([]byte("\x93NUMPY\x01\x00"), byte(len(dict)), 0)
	v1 = append(v1, dict...)
	v2 := append([]byte("\x93NUMPY\x02\x00"), binary.LittleEndian.AppendUint32(nil, uint32(len(dict)))...)
	v2 = append(v2, dict...)
	want := Header{Descr: "<f4", Shape: []int{3, 2}}
	for name, b := range map[string][]byte{"1.0": v1, "2.0": v2} {
		r := bytes.NewReader(append(b, 1, 2, 3))
		h, n, err := ReadHeader(r)
		if err != nil || !reflect.DeepEqual(h, want) || n != len(b) || r.Len() != 3 {
			t.Errorf("version %s: %+v, %d bytes, %v; want %+v, %d bytes, positioned at the data", name, h, n, err, want, len(b))
		}
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"magic", []byte("NUMPY\x01\x00\x00\x00\x00"), "magic"},
		{"version", []byte("\x93NUMPY\x04\x00\x00\x00"), "format version 4.0 is not supported"},
		{"too long", []byte("\x93NUMPY\x02\x00\x00\x00\x00\x01"), "header of 16777216 bytes is too long"},
		{"dict", append([]byte("\x93NUMPY\x01\x00\x05\x00"), "{'x':"...), "unknown key"},
	} {
		if _, _, err := ReadHeader(bytes.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, short := range [][]byte{[]byte("\x93NUM"), v1[:len(v1)-3], v2[:11]} {
		if _, _, err := ReadHeader(bytes.NewReader(short)); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: error %v, want io.ErrUnexpectedEOF", short, err)
		}
	}
}

// FuzzParseHeader checks that the header parser never panics and that
// what it accepts has a non-negative shape.
func FuzzParseHeader(f *testing.F) {
	f.Add("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }   \n")
	f.Add(`{"shape": (5,), "fortran_order": True, "descr": ">i8"}`)
	f.Add("{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 3L), }\n")
	f.Fuzz(func(t *testing.T, dict string) {
		h, err := ParseHeader(dict)
		if err != nil {
			return
		}
		if len(h.Shape) > MaxDims {
			t.Fatalf("shape %v has more than %d dimensions", h.Shape, MaxDims)
		}
		for _, d := range h.Shape {
			if d < 0 {
				t.Fatalf("negative dimension in %v", h.Shape)
			}
		}
	})
}
