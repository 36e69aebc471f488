# GPU machine, sourced at the start of every call after staging (stage_smollm2_part*.sh, stage_vllm.sh):
# FATHOM's wheels first, then vLLM's, then the source tree. In-process vLLM engine core (a spawned one would
# re-import the calling script) and no FlashInfer sampler (flashinfer is not carried).
export PYTHONPATH=/tmp/site:/tmp/vsite:$PWD/src FATHOM_CACHE=/root/fathom-cache PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_USE_FLASHINFER_SAMPLER=0 TOKENIZERS_PARALLELISM=false
export PATH=/usr/local/bin:$PATH
