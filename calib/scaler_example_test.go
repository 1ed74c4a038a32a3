package calib_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/fedcalib/fedcalib/calib"
)

// overconfident returns n examples of c classes from a model whose logits
// are T* = 2.5 times too large: labels follow softmax(z/2.5).
func overconfident(rng *rand.Rand, n, c int) *calib.Set {
	s := &calib.Set{Classes: c}
	z, p := make([]float64, c), make([]float64, c)
	for range n {
		for j := range z {
			z[j] = 4 * rng.NormFloat64()
			p[j] = z[j] / 2.5
		}
		calib.Softmax(p, p)
		y, u := 0, rng.Float64()
		for y < c-1 && u > p[y] {
			u -= p[y]
			y++
		}
		s.Logits = append(s.Logits, z...)
		s.Labels = append(s.Labels, y)
	}
	return s
}

func ExampleTemperature() {
	s := overconfident(rand.New(rand.NewPCG(1, 2)), 20000, 5)
	temp := new(calib.Temperature)
	if err := temp.Fit(s); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("T = %.1f\n", temp.T)

	z := []float64{6, 2, 0, 0, -1}
	before, after := make([]float64, 5), make([]float64, 5)
	calib.Softmax(before, z)
	temp.Predict(after, z)
	fmt.Printf("top class probability %.2f → %.2f\n", before[0], after[0])
	// Output:
	// T = 2.5
	// top class probability 0.98 → 0.69
}

func ExampleOPVector() {
	s := overconfident(rand.New(rand.NewPCG(3, 4)), 5000, 3)
	op := new(calib.OPVector)
	if err := op.Fit(s); err != nil {
		fmt.Println(err)
		return
	}
	z := []float64{4, 1, 1}
	before, after := make([]float64, 3), make([]float64, 3)
	calib.Softmax(before, z)
	op.Predict(after, z)
	fmt.Printf("softmax:    %.3f\n", before)
	fmt.Printf("calibrated: %.3f\n", after)
	// Output:
	// softmax:    [0.909 0.045 0.045]
	// calibrated: [0.623 0.189 0.189]
}

// ExampleScaler runs one round of federated averaging (paper Alg. 2) over
// three clients: each starts from the server's parameters, fits locally,
// and sends back its update.
func ExampleScaler() {
	rng := rand.New(rand.NewPCG(5, 6))
	clients := []*calib.Set{overconfident(rng, 70, 10), overconfident(rng, 70, 10), overconfident(rng, 70, 10)}

	server := calib.NewOPVector(10)
	w := server.Params()
	mean := make([]float64, len(w))
	for _, local := range clients {
		var sc calib.Scaler = calib.NewOPVector(10)
		if err := sc.SetParams(w); err != nil {
			fmt.Println(err)
			return
		}
		if err := sc.Fit(local); err != nil {
			fmt.Println(err)
			return
		}
		for k, v := range sc.Params() {
			mean[k] += (v - w[k]) / float64(len(clients))
		}
	}
	for k := range w {
		w[k] += mean[k] // server learning rate 1
	}
	if err := server.SetParams(w); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(server.NumParams(), "parameters averaged")
	// Output: 20 parameters averaged
}
