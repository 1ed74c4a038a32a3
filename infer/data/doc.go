// Package data reads the datasets that fedcalib runs models over, one
// record at a time.
//
// Open takes a dataset spec and returns a Reader that streams Records:
// raw inputs (8-bit HWC pixels, float features or a text window), a class
// label and, where the format has one, the natural client id used to
// partition the data federatedly (the LEAF user, the speaker role). Model
// preprocessing (scaling, normalisation, layout, text encoding) is not
// done here; package infer applies it.
//
// # Spec grammar
//
// A spec is FORMAT:PATH[:OPTION]. A gzip-compressed file is recognised by
// its content wherever a file is read on its own rather than from an
// archive (IDX, CIFAR batches, LEAF .json, role .txt, .npy). An IDX,
// CIFAR batch or .npy file, whose records cost little more than inflating
// them, is inflated whole by libdeflate (libdeflate.so.0, Debian's
// libdeflate0, or the file the environment variable FEDCALIB_LIBDEFLATE
// names, loaded the first time) when it is a regular file of at most
// 256 MiB, compressed and decompressed, and clean gzip; otherwise, or
// without the library, and for the text formats, whose parsing costs
// more, it is decompressed as it is read, more slowly, with the same
// bytes and errors.
// A path that contains ':' works when no option follows it.
//
//	mnist:DIR[:train|test]      {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
//	                            (or the "images.idx3" spelling) in DIR;
//	                            classes "0".."9"; default split train
//	fashion:DIR[:train|test]    the same files with Fashion-MNIST class names
//	idx:IMAGES[,LABELS]         one IDX pair; LABELS defaults to IMAGES with
//	                            "images-idx3" replaced by "labels-idx1";
//	                            classes unknown
//	cifar10:PATH[:train|test]   CIFAR-10 binary batches (data_batch_N.bin,
//	                            test_batch.bin) in a directory (or its
//	                            cifar-10-batches-bin/), a .tar.gz of them, or
//	                            one .bin file
//	cifar100:PATH[:train|test]  CIFAR-100 binary (train.bin, test.bin; also
//	                            under cifar-100-binary/); each record has two
//	                            label bytes, coarse then fine, and the fine
//	                            label (100 classes) is used
//	imagefolder:PATH[:SUBDIR]   torchvision's ImageFolder: PATH/SUBDIR/<class>/
//	                            **.png|jpg|jpeg, PATH a directory or a .tar.gz
//	                            (.tgz, .tar) of one
//	leaf:PATH[:train|test]      LEAF JSON: a .json file, or every .json under
//	                            a directory or inside a .tar.gz; with a split,
//	                            only files below a directory of that name
//	speakers:FILE.txt           a play's text split into roles by speaker
//	                            headings
//	roles:PATH                  LEAF's raw Shakespeare: one <ROLE>.txt per
//	                            role in a directory or a .tar.gz
//	npz:FILE.npz[:XKEY,YKEY]    arrays XKEY and YKEY of a NumPy archive
//	                            (default x,y, else images,labels, else
//	                            x_train,y_train); the option train or test
//	                            selects x_train,y_train or x_test,y_test
//	npy:X.npy,Y.npy             a NumPy input array and its label array
//
// Without a known FORMAT prefix, Open detects the format of .npz (npz),
// .json (leaf) and .txt (speakers) files, IDX image files (idx), CIFAR-10
// batch files, and directories holding MNIST IDX files or CIFAR-10
// batches. SpecHelp holds a summary of the grammar for --help.
//
// # Formats
//
// IDX: unsigned-byte image files of shape N×H×W (one channel) or N×H×W×C
// and label files of shape N. Records are H×W×C images.
//
// CIFAR: each record is 32×32 RGB, stored channel-major in the file and
// returned as HWC. Batches are read in name order from a directory and in
// archive order from a .tar.gz.
//
// ImageFolder: the classes are the sorted names of PATH/SUBDIR's
// subdirectories, as torchvision's ImageFolder makes them; every class must
// hold an image. Files whose extensions torchvision ignores are ignored;
// BMP, TIFF, WebP, PPM and PGM images are refused with an error, since the
// Go standard library does not decode them. PNG and JPEG (recognised by
// content) are converted to 8-bit RGB as PIL's convert("RGB") does: gray
// is replicated, alpha dropped, a palette looked up; 16-bit colour keeps
// each sample's high byte but 16-bit gray is clipped at 255 (PIL opens it
// as a 32-bit integer image); CMYK becomes (255−K)·(1 − C/255) with PIL's
// rounding. EXIF orientation is not applied: torchvision's loader does
// not apply it either, so a model was trained and evaluated on the stored
// pixels. PNG is decoded with the standard library;
// JPEG as described under "JPEG decoding" below, to PIL's pixels. From a
// directory, records come class by class, each class walked in lexical
// order; from an archive, which is read twice (once to list the classes),
// they come in archive order. Images may differ in size; Shape says each
// one's.
//
// LEAF: files with the keys "users", "num_samples" and "user_data", where
// user_data[u] holds the arrays "x" and "y". The reader walks each file's
// JSON tokens to "user_data" and decodes one user's arrays at a time, so
// memory holds one user, not one file. The kind of input is detected from
// the data: an array of numbers is returned in Float (FEMNIST's 784 values
// have Shape [28 28], labels 0..61 for digits, upper- and lower-case
// letters; LEAF's FEMNIST has 1.0 for background and 0.0 for ink); a string
// is returned in Text, and its label y, a one-character string, is mapped
// to its index in ShakespeareLetters. Client is the user id.
//
// Shakespeare text (speakers and roles): each role's text is cleaned as
// LEAF's preprocessing does (newlines become spaces, runs of spaces become
// one space), and every window of WindowLen characters is a record whose
// label is the index in ShakespeareLetters of the character that follows
// it; windows followed by a character outside that vocabulary are skipped.
// Characters of the window itself are returned as they are, so text
// encoders should map characters outside the vocabulary explicitly
// (LetterIndex returns -1 for them). For speakers, a heading is a line
// ending in ':' that starts the file or follows a blank line ("First
// Citizen:"); the lines that follow, up to the next heading, are the
// role's, and all turns of a role, joined by newlines in file order, form
// one client's text. Records come role by role in order of first
// appearance; text before the first heading is skipped. For roles, each
// file is one role, named by its base name without extension.
//
// NumPy: X has shape [N, ...] and any float, integer or bool dtype; Y has
// shape [N] or [N, 1] and integer (or integral float) values. A uint8 X of
// row shape [H, W] or [H, W, C] is returned as an Image of Shape [H W 1]
// or [H W C] (rows are assumed to be HWC); any other X is returned in
// Float with the row shape as Shape ([1] for a one-dimensional X).
// Fortran-order arrays with more than one non-trivial dimension are
// refused, since they cannot be streamed by rows.
//
// # JPEG decoding
//
// JPEG images decode to the pixels of PIL's Image.open(f).convert("RGB")
// (and so torchvision's loader), so that a model sees the pixels it was
// trained on: they are decoded by libjpeg-turbo, the library PIL uses,
// with libjpeg's default decompression (accurate integer IDCT, fancy
// chroma upsampling), through its TurboJPEG API. The library,
// libturbojpeg.so.0 (Debian's libturbojpeg0) or the file named by
// JPEGLibraryEnv, is loaded the first time a JPEG is decoded; where it
// cannot be, decoding fails with an error wrapping ErrJPEGLibrary that
// says how to install it. Gray is replicated to RGB; a 4-component image
// is read as Adobe's inverted CMYK (PIL's rule for every CMYK JPEG, YCCK
// converted to CMYK by libjpeg) and converted to RGB as PIL does. A file
// libjpeg decodes with a warning (corrupt entropy-coded data, bytes
// before a marker) gives libjpeg's pixels, as in PIL; a truncated file is
// refused, as PIL refuses it. On the 60,000 JPEGs of the CIFAR-10
// ImageFolder archive, and on fixtures of every subsampling, progressive,
// restart markers, arithmetic coding, CMYK and YCCK, the pixels equal
// PIL's (libjpeg-turbo 2.1.5) exactly.
//
// Images whose header declares more than MaxImagePixels pixels (PIL's
// decompression-bomb limit) are refused before they are decoded, PNG and
// JPEG alike. A JPEG file is read into memory whole, up to 16 MiB plus 16
// bytes per sample its header declares; progressive JPEGs of more than
// 500 scans are refused.
//
// # Errors
//
// Errors name the file (for archive members, ARCHIVE:MEMBER) and what is
// wrong with it; those caused by malformed content wrap ErrFormat.
package data
