package federation_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// Evaluating the base model on the test rows of 100 label-skewed clients:
// exactly, where the summed statistics give the pooled metrics bit for
// bit, and with (ε = 1, δ = 1e-5) user-level differential privacy.
func ExampleEvaluate() {
	data := overconfident(20000, 1)
	part, err := federation.Dirichlet(data.Labels, data.Classes, 100, 0.1, federation.PartitionOptions{Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	pop, err := federation.NewPopulation(data, part, federation.Test)
	if err != nil {
		log.Fatal(err)
	}
	exact, err := federation.Evaluate(context.Background(), pop, nil, federation.EvalOptions{})
	if err != nil {
		log.Fatal(err)
	}
	test := data.Subset(part.Rows(federation.Test))
	probs, err := calib.Probabilities(test, nil)
	if err != nil {
		log.Fatal(err)
	}
	pooled, err := calib.Evaluate(probs, test.Labels, test.Classes, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d clients, %d test rows: cwECE %.2f%%, equal to the pooled metrics: %v\n",
		exact.Clients, exact.Metrics.N, 100*exact.Metrics.CWECE, exact.Metrics == pooled)

	private, err := federation.Evaluate(context.Background(), pop, nil, federation.EvalOptions{
		Seed:    1,
		Privacy: &federation.Privacy{Epsilon: 1, Delta: 1e-5, Clip: 100},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("private: ε = %.3g spent, σ = %.1f per statistic\n", private.Privacy.Epsilon, private.Privacy.Sigma)
	// Output:
	// 100 clients, 2003 test rows: cwECE 3.55%, equal to the pooled metrics: true
	// private: ε = 1 spent, σ = 404.5 per statistic
}
