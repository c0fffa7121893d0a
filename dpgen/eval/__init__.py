"""Evaluators: downstream classifiers trained on synthetic data, FID, and W2 between samples.

* :func:`evaluate_downstream` - LogReg / MLP / CNN trained on synthetic (x, y), accuracy (%) on
  the real test set, early stopping on a 10% holdout of the synthetic set (DP-Sinkhorn App. D.2).
* :func:`compute_fid`, :func:`real_statistics`, :class:`InceptionFeatures` - FID with
  pytorch-fid's Inception weights, found locally (never downloaded; :class:`FIDUnavailable`
  otherwise); ``weights="random"`` for a smoke FID that is not comparable to the papers.
* :func:`class_mean_baseline`, :func:`spread_ratio`, :func:`prdc` (dpgen.eval.fidelity) - what a generator adds
  beyond class templates: the nearest-synthetic-class-mean accuracy, the intra-class spread against real data,
  precision / recall / density / coverage in Inception features.
* :func:`accuracy` - a classifier's accuracy (%) on labelled tensors.
* :func:`w2_distance` - exact (POT) or Gaussian closed-form W2 between two point clouds.

``dpgen.eval.fid`` imports pytorch-fid lazily (optional extra ``fid``), so importing this package
works without it.
"""

from dpgen.eval.downstream import (CNN, MLP, MODELS, accuracy, evaluate_downstream, flatten_results,
                                    fit_logreg, holdout_split, train_torch_classifier)
from dpgen.eval.fid import (FID_WEIGHTS_FILE, FID_WEIGHTS_URL, WEIGHTS_ENV, FIDUnavailable,
                            InceptionFeatures, activation_statistics, compute_activations,
                            compute_fid, fid_from_activations, find_fid_weights,
                            frechet_distance, get_extractor, load_statistics, real_features,
                            real_statistics, stats_cache_path)
from dpgen.eval.fidelity import class_mean_baseline, intra_class_spread, prdc, set_fidelity, spread_ratio
from dpgen.eval.w2 import gaussian_w2, w2_distance, w2_distance_with_method

__all__ = [
    "CNN", "MLP", "MODELS", "accuracy", "evaluate_downstream", "flatten_results", "fit_logreg",
    "holdout_split", "train_torch_classifier",
    "FID_WEIGHTS_FILE", "FID_WEIGHTS_URL", "WEIGHTS_ENV", "FIDUnavailable", "InceptionFeatures",
    "activation_statistics", "compute_activations", "compute_fid", "fid_from_activations",
    "find_fid_weights", "frechet_distance", "get_extractor", "load_statistics",
    "real_features", "real_statistics", "stats_cache_path",
    "class_mean_baseline", "intra_class_spread", "prdc", "set_fidelity", "spread_ratio",
    "gaussian_w2", "w2_distance", "w2_distance_with_method",
]
