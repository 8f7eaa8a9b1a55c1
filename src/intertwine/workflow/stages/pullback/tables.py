"""The excitation-pullback stage's tables."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from intertwine.workflow.tables import PROVENANCE


# The excitation-pullback stage (intertwine.pullback.measurements). mode: gradient, global, per_neuron.
# Per member: cosines between its pullbacks and those of the same function with a random group
# element on its weights (group permutation, spread 0; grelu, log-normal scale spread sigma).
def at_stage_temperature(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a pullback table at the stage's own temperature (``pullback.temperature``): those
    of a ``pullback.sweep`` temperature (``sweep`` true) left out; a table without the column as it is."""
    return table[~table["sweep"].astype(bool)] if "sweep" in table else table


PULLBACK_SYMMETRY = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("group", pa.string()),
        pa.field("scale_spread", pa.float64()),
        pa.field("mode", pa.string()),
        pa.field("cos_mean", pa.float64()),  # over images
        pa.field("cos_min", pa.float64()),
        pa.field("images", pa.int64()),  # images with a cosine (neither pullback zero)
        pa.field("logit_change", pa.float64()),  # the element's change of the function: rounding
        pa.field("probe_images", pa.int64()),
        pa.field("temperature", pa.float64()),
        pa.field("sweep", pa.bool_()),  # true: a pullback.sweep temperature, not the stage's own
        pa.field("dtype", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed group scale_spread mode temperature"},
)


# Per pair of members: cosines between their pullbacks of the class logit (site "logit", units -1)
# or of hidden unit unit_a of a and its Hungarian match unit_b of b at a site.
PULLBACK_AGREEMENT = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("pair", pa.int64()),
        pa.field("seed_a", pa.int64()),
        pa.field("seed_b", pa.int64()),
        pa.field("site", pa.string()),
        pa.field("unit_a", pa.int64()),
        pa.field("unit_b", pa.int64()),
        pa.field("match_correlation", pa.float64()),  # of the matched units' activations; null for logits
        pa.field("mode", pa.string()),
        pa.field("cos_mean", pa.float64()),
        pa.field("cos_min", pa.float64()),
        pa.field("images", pa.int64()),
        pa.field("probe_images", pa.int64()),
        pa.field("temperature", pa.float64()),
        pa.field("sweep", pa.bool_()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant pair site unit_a mode temperature"},
)


# Per pair of members (ours), direction, mode and temperature: the paper's PGD toward a random
# other class along the source member's direction (seed_source), read by the other member
# (seed_other) on the same perturbed images (intertwine.pullback.pgd.transfer_measures):
# fractions of images predicted as the target, the other member's target probability and the
# change of its target-minus-best-other logit margin, means over images.
PULLBACK_TRANSFER = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("pair", pa.int64()),
        pa.field("seed_source", pa.int64()),
        pa.field("seed_other", pa.int64()),
        pa.field("mode", pa.string()),
        pa.field("temperature", pa.float64()),
        pa.field("sweep", pa.bool_()),
        pa.field("images", pa.int64()),
        pa.field("source_success", pa.float64()),  # the source member predicts the target after PGD
        pa.field("transfer_success", pa.float64()),  # the other member does
        pa.field("transfer_already", pa.float64()),  # the other member did on the clean image
        pa.field("transfer_target_prob_before", pa.float64()),
        pa.field("transfer_target_prob", pa.float64()),
        pa.field("transfer_prob_gain", pa.float64()),
        pa.field("transfer_margin_gain", pa.float64()),  # logits: target minus best other
        # the other member's success after each PGD step, its first and its mean over the steps
        # (pgd.transfer_curve: the full budget saturates, the curve separates the modes)
        pa.field("transfer_success_by_step", pa.list_(pa.float64())),
        pa.field("transfer_success_first_step", pa.float64()),
        pa.field("transfer_success_area", pa.float64()),
        pa.field("pgd_steps", pa.int64()),
        pa.field("pgd_epsilon", pa.float64()),  # L2, images in [-1, 1]
        pa.field("pgd_step_size", pa.float64()),
        pa.field("probe_images", pa.int64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant pair seed_source mode temperature"},
)


# Hypothesis 1 (early emergence of stable excitation patterns), per zoo member, recorded epoch (0: initialisation) and ReLU call
# site: the agreement of the member's binary activation pattern on its probe images with the
# pattern after the last epoch (final_epoch), the agreement by chance with the units' rates, and the
# fraction of active gates (intertwine.gates.settling_rows). kept_epoch: the epoch whose
# weights the member keeps (best validation).
PULLBACK_SETTLING = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("epoch", pa.int64()),
        pa.field("site", pa.string()),
        pa.field("units", pa.int64()),  # gates per image at the site (channels x positions)
        pa.field("agreement", pa.float64()),
        pa.field("chance", pa.float64()),
        pa.field("active", pa.float64()),
        # the epoch's correlation of gating tensor fields with the final one (gates.path_correlations;
        # the same on each of the epoch's rows; NaN in a record made before it existed)
        pa.field("path_rho_low", pa.float64()),  # its 5 % quantile over the probe images
        pa.field("path_rho_positive", pa.float64()),  # the fraction of images with rho > 0
        pa.field("path_rho_mean", pa.float64()),
        pa.field("final_epoch", pa.int64()),
        pa.field("kept_epoch", pa.int64()),
        pa.field("probe_images", pa.int64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed epoch site"},
)


# The paper's grids on a torchvision ImageNet model (pullback.external): per mode, image and target
# class, the model's target probability before and after the paper's PGD along that mode's
# direction (and after each step), and whether the target is predicted after the last step.
PULLBACK_EXTERNAL = pa.schema(
    [
        pa.field("name", pa.string()),
        pa.field("arch", pa.string()),
        pa.field("mode", pa.string()),
        pa.field("image", pa.string()),  # file name in its class folder
        pa.field("label", pa.int64()),  # ImageNet index of its folder
        pa.field("target", pa.int64()),
        pa.field("target_prob_before", pa.float64()),
        pa.field("target_prob", pa.float64()),
        pa.field("success", pa.bool_()),
        pa.field("target_prob_by_step", pa.list_(pa.float64())),
        pa.field("size", pa.int64()),
        pa.field("temperature", pa.float64()),
        pa.field("functional", pa.string()),
        pa.field("pgd_steps", pa.int64()),
        pa.field("pgd_epsilon", pa.float64()),
        pa.field("pgd_step_size", pa.float64()),
        *PROVENANCE,
    ],
    metadata={"keys": "name mode image target"},
)


# Per member and mode: deletion and insertion curves (mean over images at 0, 1/steps, ..., 1 of
# the pixels; the class's probability) and their areas, the mean image's probability, and the PGD
# toward a random other class (success: the target predicted after the last step).
PULLBACK_FAITHFULNESS = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("mode", pa.string()),
        pa.field("images", pa.int64()),
        pa.field("deletion_auc", pa.float64()),
        pa.field("insertion_auc", pa.float64()),
        pa.field("deletion_curve", pa.list_(pa.float64())),
        pa.field("insertion_curve", pa.list_(pa.float64())),
        pa.field("mean_image_prob", pa.float64()),
        pa.field("pgd_success", pa.float64()),
        pa.field("pgd_target_prob", pa.float64()),
        pa.field("pgd_success_by_step", pa.list_(pa.float64())),
        pa.field("pgd_steps", pa.int64()),
        pa.field("pgd_epsilon", pa.float64()),  # L2, images in [-1, 1]
        pa.field("pgd_step_size", pa.float64()),
        pa.field("probe_images", pa.int64()),
        pa.field("temperature", pa.float64()),
        pa.field("sweep", pa.bool_()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed mode temperature"},
)

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {
    "pullback_symmetry": PULLBACK_SYMMETRY,
    "pullback_agreement": PULLBACK_AGREEMENT,
    "pullback_faithfulness": PULLBACK_FAITHFULNESS,
    "pullback_transfer": PULLBACK_TRANSFER,
    "pullback_settling": PULLBACK_SETTLING,
    "pullback_external": PULLBACK_EXTERNAL,
}
