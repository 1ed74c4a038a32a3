// Package logits reads and writes the fedcalib logits file (SPEC §3).
//
// A logits file is a NumPy .npz archive holding
//
//	logits  float32 [N, C]  the model's outputs, one row per example
//	labels  int64   [N]     the true class of each example, in [0, C)
//	client  int32   [N]     optional: the client that holds each example
//	split   uint8   [N]     optional: 0 train, 1 calibration, 2 test
//	classes <U…     [C]     optional: the class names, in label order
//
// so that NumPy users can read it with numpy.load and write one with
// numpy.savez (classes=numpy.array(["cat", "dog"]) makes the string
// array Write writes; Read also accepts big-endian >U… and byte strings
// |S…, taken as UTF-8, and checks the names with calib.CheckClassNames).
// Read also accepts float64 logits and any integer type for labels,
// client and split, converting them; big-endian arrays; Fortran-ordered
// (column-major) logits, which it transposes; and archives written by
// numpy.savez_compressed. It reads each array in a few large blocks —
// one system call per MiB of an uncompressed member — and decodes them in
// tight loops; Write writes an uncompressed archive, as numpy.savez does.
//
// Read holds the whole file. Open gives an Archive, which reads the
// arrays when asked: the columns without the logits (ReadColumns), then
// the logits (ReadLogits), or the rows in order a block at a time
// (Blocks), with the same checks as Read, so that a file of any size can
// be measured in a few blocks of memory.
package logits
