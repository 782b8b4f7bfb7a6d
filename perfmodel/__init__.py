"""perfmodel: predict, search and validate the step time and memory of LLM training on GPU/TPU clusters.

    import perfmodel
    est = perfmodel.estimate(perfmodel.load_model("llama-3-70b"), perfmodel.load_hardware("dgx-h100"),
                             perfmodel.Plan(gpus=512, tp=8, pp=4, micro_batch=1, global_batch=1024, seq_len=8192))
    est.step_time_s, est.mfu, est.fits_in_memory, est.memory_bytes.reserved
"""

from .cost.estimate import estimate
from .errors import InputError
from .hardware import System, load_hardware
from .models import ModelConfig, load_model
from .plan import Plan
from .result import Estimate

__all__ = ["estimate", "load_model", "load_hardware", "Plan", "Estimate", "ModelConfig", "System", "InputError"]
