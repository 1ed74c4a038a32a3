// Package zoo reads and writes the committed logits of the model zoo
// (models/logits/NAME.npz): the outputs of a zoo model over its whole
// data set, in the row order its partition file was made for, so that
// the results of docs/RESULTS.md can be reproduced from a fresh clone
// without ONNX Runtime or training.
//
// A committed logits file is an ordinary logits file (docs/LOGITS.md:
// float32 "logits", "labels", the class names in "classes"), read by
// package infer/logits like any other, written with every member
// deflated and one more member, "provenance": a one-element NumPy string
// array holding the JSON of a Provenance — the model's SHA-256, the data
// it was computed on (each source's spec and its files' SHA-256) and the
// decoder that turned the data into the model's input. Pack writes one
// from a file `fedcalib infer` wrote; the result depends only on its
// inputs (no time stamps), so packing the same logits again gives the same
// bytes. ReadProvenance reads the record back and Check verifies it
// against a model card's recorded SHA-256s.
package zoo
