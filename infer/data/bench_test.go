package data

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

// countAll reads r to the end and returns the number of records.
func countAll(b *testing.B, r Reader) int {
	var rec Record
	n := 0
	for {
		err := r.Next(&rec)
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		n++
	}
	r.Close()
	return n
}

func reportRecords(b *testing.B, records int) {
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkIDX reads MNIST's training set (60,000 gzip-compressed
// images). The baselines "gunzip" and "gunzip-stream" only decompress the
// two files, with libdeflate where it loads and with klauspost/compress.
func BenchmarkIDX(b *testing.B) {
	dir := mnistDir(b)
	images := dir + "/train-images-idx3-ubyte.gz"
	labels := dir + "/train-labels-idx1-ubyte.gz"
	for _, whole := range []bool{true, false} {
		name := "gunzip"
		if !whole {
			name = "gunzip-stream"
		}
		b.Run(name, func(b *testing.B) {
			records := 0
			for b.Loop() {
				for _, name := range []string{images, labels} {
					s, err := openStream(name, whole)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.Copy(io.Discard, s); err != nil {
						b.Fatal(err)
					}
					s.Close()
				}
				records += 60000
			}
			reportRecords(b, records)
		})
	}
	b.Run("reader", func(b *testing.B) {
		records := 0
		for b.Loop() {
			r, err := Open("mnist:" + dir)
			if err != nil {
				b.Fatal(err)
			}
			records += countAll(b, r)
		}
		reportRecords(b, records)
	})
}

// syntheticFEMNIST returns a LEAF file of users×perUser FEMNIST-like
// samples, with values written as LEAF writes them.
func syntheticFEMNIST(users, perUser int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"users": [], "num_samples": [], "user_data": {`)
	for u := range users {
		if u > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, `"f%04d_00": {"x": [`, u)
		for s := range perUser {
			if s > 0 {
				sb.WriteString(", ")
			}
			sb.WriteByte('[')
			for i := range 784 {
				if i > 0 {
					sb.WriteString(", ")
				}
				if (i+s+u)%5 == 0 {
					fmt.Fprintf(&sb, "%v", float32(i%97)/97)
				} else {
					sb.WriteString("1.0")
				}
			}
			sb.WriteByte(']')
		}
		sb.WriteString(`], "y": [`)
		for s := range perUser {
			if s > 0 {
				sb.WriteString(", ")
			}
			fmt.Fprint(&sb, (s+u)%62)
		}
		sb.WriteString("]}")
	}
	sb.WriteString("}}")
	return []byte(sb.String())
}

// BenchmarkLEAF reads an in-memory FEMNIST-like LEAF file (20 users × 100
// samples) with the streaming reader, against the baseline "unmarshal",
// which decodes the whole file at once with json.Unmarshal. "archive"
// reads the training split of the real FEMNIST archive, when present.
func BenchmarkLEAF(b *testing.B) {
	file := syntheticFEMNIST(20, 100)
	const records = 20 * 100
	b.Run("unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(file)))
		for b.Loop() {
			var v struct {
				UserData map[string]struct {
					X [][]float32 `json:"x"`
					Y []int       `json:"y"`
				} `json:"user_data"`
			}
			if err := json.Unmarshal(file, &v); err != nil {
				b.Fatal(err)
			}
		}
		reportRecords(b, records*b.N)
	})
	b.Run("reader", func(b *testing.B) {
		b.SetBytes(int64(len(file)))
		for b.Loop() {
			r, err := newLEAFReader(&byteFiles{names: []string{"f.json"}, data: [][]byte{file}})
			if err != nil {
				b.Fatal(err)
			}
			if n := countAll(b, r); n != records {
				b.Fatalf("%d records, want %d", n, records)
			}
		}
		reportRecords(b, records*b.N)
	})
	b.Run("archive", func(b *testing.B) {
		archive := sharedData(b, "femnist-leaf.tar.gz")
		total := 0
		for b.Loop() {
			r, err := Open("leaf:" + archive + ":train")
			if err != nil {
				b.Fatal(err)
			}
			total += countAll(b, r)
		}
		reportRecords(b, total)
	})
}
