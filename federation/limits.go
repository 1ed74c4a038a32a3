package federation

import "github.com/fedcalib/fedcalib/calib"

// checkSize returns an error when the calibrator of the protocol called
// name (a calib.Method's Protocol) over classes classes and bins bins per
// class would hold more than calib.MaxSize values (calib.Method.CheckSize),
// before any of it is allocated. Protocols outside the registry, such as
// a FedAvg over a scaler of the caller's, are not checked.
func checkSize(name string, classes, bins int) error {
	for _, m := range calib.Methods() {
		if m.Protocol == name {
			return m.CheckSize(classes, bins)
		}
	}
	return nil
}
