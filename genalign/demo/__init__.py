"""Demo: `genalign pretrain-demo`, which regenerates the shipped toy model and the shape
classifiers its rewards load (it trains a model and a reward, so it sits above both)."""
