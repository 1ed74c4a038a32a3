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
// subset makes a fixed subset of a data set too large to commit (the
// rows of some splits of clients drawn from its partition), for pack to
// pack the logits of (--subset):
//
//	go run ./cmd/zoo-logits subset --data roles:../shared/data/shakespeare-leaf-roles.tar.gz \
//	    --partition models/partitions/shakespeare-roles-natural.json.gz --clients 100 --seed 1 \
//	    --splits calibration,test --out-partition /tmp/p.json --out-data /tmp/s.json --out-record /tmp/s.subset.json
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

	"github.com/fedcalib/fedcalib/federation"
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
	case "subset":
		err = subset(os.Args[2:])
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
	fmt.Fprintln(os.Stderr, "usage: zoo-logits pack --name N (--model M.onnx | --model-sha256 HEX) --data SPEC... --logits IN.npz --out OUT.npz [--producer TEXT] [--decoder TEXT] [--subset RECORD.json]\n       zoo-logits subset --data SPEC... --partition FULL.json[.gz] --clients K --seed S --splits LIST --out-partition P.json --out-data SUBSET.json --out-record RECORD.json\n       zoo-logits show FILE.npz...")
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
	subsetRecord := fs.String("subset", "", "the record zoo-logits subset wrote, when --data is a subset it made")
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
	var sub *zoo.Subset
	if *subsetRecord != "" {
		b, err := os.ReadFile(*subsetRecord)
		if err != nil {
			return err
		}
		sub = new(zoo.Subset)
		if err := json.Unmarshal(b, sub); err != nil {
			return fmt.Errorf("%s: %w", *subsetRecord, err)
		}
	}
	p := zoo.Provenance{Model: *name, ModelSHA256: msha, Producer: *producer, Subset: sub}
	for _, d := range data {
		s, err := zoo.NewSource(d)
		if err != nil {
			return err
		}
		if sub != nil {
			s.Decoder = zoo.SubsetDecoder
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

func subset(args []string) error {
	fs := flag.NewFlagSet("subset", flag.ExitOnError)
	part := fs.String("partition", "", "the whole data set's partition file, e.g. models/partitions/shakespeare-roles-natural.json.gz")
	clients := fs.Int("clients", 0, "the number of clients to draw")
	seed := fs.Uint64("seed", 1, "the seed they are drawn with")
	splits := fs.String("splits", "calibration,test", "the splits of each drawn client to keep")
	outPart := fs.String("out-partition", "", "the subset's partition file to write (JSON)")
	outData := fs.String("out-data", "", "the subset's data to write (LEAF JSON), for fedcalib infer --data leaf:FILE")
	outRecord := fs.String("out-record", "", "the subset's record to write (JSON), for pack --subset")
	var data specs
	fs.Var(&data, "data", "a data spec of the whole data set, in row order (repeat for several)")
	fs.Parse(args)
	if *part == "" || *clients == 0 || *outPart == "" || *outData == "" || *outRecord == "" || len(data) == 0 {
		usage()
	}
	ss, err := zoo.ParseSplits(*splits)
	if err != nil {
		return err
	}
	full, err := federation.ReadPartition(*part)
	if err != nil {
		return err
	}
	rec := zoo.Subset{Clients: *clients, Seed: *seed}
	for _, s := range ss {
		rec.Splits = append(rec.Splits, s.String())
	}
	for _, d := range data {
		s, err := zoo.NewSource(d)
		if err != nil {
			return err
		}
		rec.Of = append(rec.Of, s)
	}
	if rec.Partition, err = zoo.FileSHA256(*part); err != nil {
		return err
	}
	sub, err := zoo.MakeSubset(data, full, zoo.SubsetOptions{Clients: *clients, Seed: *seed, Splits: ss}, *outData)
	if err != nil {
		return err
	}
	if err := federation.WritePartition(*outPart, sub); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := fileio.Write(*outRecord, append(b, '\n')); err != nil {
		return err
	}
	fmt.Printf("subset: %d of %d clients, %d rows (%s) of %d: %s, %s, %s\n",
		sub.Len(), full.Len(), sub.Data.Examples, *splits, full.Data.Examples, *outData, *outPart, *outRecord)
	return nil
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
