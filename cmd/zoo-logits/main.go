// Command zoo-logits packs the logits `fedcalib infer` wrote for a zoo
// model into a committed logits file (package zoo: compressed, with
// provenance), and shows or verifies one. Run from the repository root:
//
//	go run ./cmd/zoo-logits pack --name mnist-tiny --model models/mnist-tiny/model.onnx \
//	    --data mnist:$GOMNIST/data:all --logits /tmp/mnist-tiny.npz --out models/logits/mnist-tiny.npz
//	go run ./cmd/zoo-logits show models/logits/mnist-tiny.npz
//
// Logits computed where the ONNX file is not kept (the GPU machine of
// models/gpu-zoo.sh) are packed with --model-sha256 HEX in place of --model.
//
// show prints the provenance record, the file's size and SHA-256, after
// checking the values against the record; its exit status is 1 when that
// check fails. The Makefile's `logits-pack` target runs pack for every
// model that has an ONNX file.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/zoo"
)

type specs []string

func (s *specs) String() string     { return strings.Join(*s, ",") }
func (s *specs) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "pack":
		err = pack(os.Args[2:])
	case "show":
		err = show(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "zoo-logits:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: zoo-logits pack --name N (--model M.onnx | --model-sha256 HEX) --data SPEC... --logits IN.npz --out OUT.npz [--producer TEXT] [--decoder TEXT]\n       zoo-logits show FILE.npz...")
	os.Exit(2)
}

func pack(args []string) error {
	fs := flag.NewFlagSet("pack", flag.ExitOnError)
	name := fs.String("name", "", "the zoo model's name, e.g. mnist-cnn")
	model := fs.String("model", "", "the ONNX file the logits were computed with (its sha256 is recorded)")
	modelSHA := fs.String("model-sha256", "", "instead of --model: the hex SHA-256 of the ONNX file, where it is not kept (logits computed on another machine)")
	in := fs.String("logits", "", "the logits file fedcalib infer wrote")
	out := fs.String("out", "", "the committed logits file to write, e.g. models/logits/mnist-cnn.npz")
	producer := fs.String("producer", "", "what computed the logits, e.g. \"fedcalib infer (commit abc1234)\"")
	decoder := fs.String("decoder", "", "how the records were decoded, where not by fedcalib's own readers (replaces each source's decoder)")
	var data specs
	fs.Var(&data, "data", "a data spec infer read, in row order (repeat for several)")
	fs.Parse(args)
	if *name == "" || (*model == "") == (*modelSHA == "") || *in == "" || *out == "" || len(data) == 0 {
		usage()
	}
	msha := strings.ToLower(*modelSHA)
	if *model != "" {
		var err error
		if msha, err = fileio.SHA256(*model); err != nil {
			return err
		}
	} else if b, err := hex.DecodeString(msha); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("--model-sha256 %q: want 64 hex digits", *modelSHA)
	}
	p := zoo.Provenance{Model: *name, ModelSHA256: msha, Producer: *producer}
	for _, d := range data {
		s, err := zoo.NewSource(d)
		if err != nil {
			return err
		}
		if *decoder != "" {
			s.Decoder = *decoder
		}
		p.Sources = append(p.Sources, s)
	}
	f, err := logits.Read(*in)
	if err != nil {
		return err
	}
	if err := zoo.Pack(*out, f, p); err != nil {
		return err
	}
	return show([]string{*out})
}

func show(paths []string) error {
	for _, path := range paths {
		p, err := zoo.Verify(path, "", "")
		if err != nil {
			return err
		}
		h, err := fileio.SHA256(path)
		if err != nil {
			return err
		}
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		rec, _ := json.MarshalIndent(p, "", "  ")
		fmt.Printf("%s: %d bytes, sha256 %s\n%s\n", path, st.Size(), h, rec)
	}
	return nil
}
