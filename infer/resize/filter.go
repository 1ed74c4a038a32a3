package resize

import (
	"fmt"
	"math"
	"strings"
)

// Filter is a resampling filter, named as torchvision's InterpolationMode
// names it. The zero value is Bilinear, torchvision's default.
type Filter int

// Filters.
const (
	Bilinear Filter = iota // triangle filter, support 1
	Nearest                // nearest sample, no filtering
	Bicubic                // cubic convolution with a = −0.5, support 2
	Box                    // box filter, support ½
	Hamming                // Hamming-windowed sinc, support 1
	Lanczos                // Lanczos-windowed sinc, support 3
)

var filterNames = [...]string{"bilinear", "nearest", "bicubic", "box", "hamming", "lanczos"}

// String returns the filter's name, as ParseFilter reads it.
func (f Filter) String() string {
	if f < 0 || int(f) >= len(filterNames) {
		return fmt.Sprintf("Filter(%d)", int(f))
	}
	return filterNames[f]
}

// ParseFilter reads a filter name (case-insensitive): bilinear, nearest,
// bicubic, box, hamming or lanczos ("linear", "cubic" and "lanczos3" are
// accepted as timm writes them).
func ParseFilter(s string) (Filter, error) {
	switch n := strings.ToLower(strings.TrimSpace(s)); n {
	case "linear":
		return Bilinear, nil
	case "cubic":
		return Bicubic, nil
	case "lanczos3":
		return Lanczos, nil
	default:
		for i, name := range filterNames {
			if n == name {
				return Filter(i), nil
			}
		}
	}
	return 0, fmt.Errorf("interpolation %q: want one of %s", s, strings.Join(filterNames[:], ", "))
}

// PILFilter returns the Filter of a PIL resampling constant, as Hugging
// Face preprocessor configs record it ("resample": 0 nearest, 1 lanczos,
// 2 bilinear, 3 bicubic, 4 box, 5 hamming).
func PILFilter(code int) (Filter, error) {
	switch code {
	case 0:
		return Nearest, nil
	case 1:
		return Lanczos, nil
	case 2:
		return Bilinear, nil
	case 3:
		return Bicubic, nil
	case 4:
		return Box, nil
	case 5:
		return Hamming, nil
	}
	return 0, fmt.Errorf("PIL resampling filter %d: want 0 to 5", code)
}

// support returns the filter's half-width at scale 1.
func (f Filter) support() float64 {
	switch f {
	case Box:
		return 0.5
	case Bicubic:
		return 2
	case Lanczos:
		return 3
	}
	return 1
}

// weight evaluates the filter's kernel at x.
func (f Filter) weight(x float64) float64 {
	switch f {
	case Box:
		if x > -0.5 && x <= 0.5 {
			return 1
		}
		return 0
	case Bicubic:
		const a = -0.5
		x = math.Abs(x)
		if x < 1 {
			return ((a+2)*x-(a+3))*x*x + 1
		}
		if x < 2 {
			return (((x-5)*x+8)*x - 4) * a
		}
		return 0
	case Hamming:
		x = math.Abs(x)
		if x == 0 {
			return 1
		}
		if x >= 1 {
			return 0
		}
		x *= math.Pi
		// The window's constants are single-precision, as PIL writes them.
		return math.Sin(x) / x * (float64(float32(0.54)) + float64(float32(0.46))*math.Cos(x))
	case Lanczos:
		if x >= -3 && x < 3 {
			return sinc(x) * sinc(x/3)
		}
		return 0
	}
	x = math.Abs(x) // Bilinear
	if x < 1 {
		return 1 - x
	}
	return 0
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	x *= math.Pi
	return math.Sin(x) / x
}
