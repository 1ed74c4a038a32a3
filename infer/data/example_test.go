package data_test

import (
	"fmt"
	"io"
	"log"

	"github.com/fedcalib/fedcalib/infer/data"
)

func ExampleOpen() {
	r, err := data.Open("leaf:testdata/leaf/shakespeare:test")
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	classes := r.Classes()
	var rec data.Record
	for {
		err := r.Next(&rec)
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %.24q… → %q\n", rec.Client, rec.Text, classes[rec.Label])
	}
	// Output:
	// ARIEL: "To be, or not to be: tha"… → "f"
	// ARIEL: "He said \"hi\" \\ and left "… → "\n"
	// CALIBAN: "aaaaaaaaaaaaaaaaaaaaaaaa"… → "}"
}

func ExampleOpen_images() {
	r, err := data.Open("imagefolder:testdata/imagefolder")
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	var rec data.Record
	if err := r.Next(&rec); err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Classes(), rec.Shape, rec.Label, rec.Image[:6])
	// Output:
	// [cat dog] [2 2 3] 0 [255 0 0 0 255 0]
}

func ExampleLetterIndex() {
	for _, c := range "a}$" {
		fmt.Println(string(c), data.LetterIndex(c))
	}
	// Output:
	// a 53
	// } 79
	// $ -1
}
