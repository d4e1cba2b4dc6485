"""Type stubs of reforge's extension module (python/src/module.cc). The documented API is the
reforge package; these are the calls it makes."""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__version__: str

class Error(RuntimeError):
    """A reforge error: the message names what is wrong and where, as the CLI's does."""

class InvalidModel(Error):
    """The ONNX model (or its checkpoint) cannot be imported or built."""

class InvalidInput(Error):
    """A run input is unknown, missing, or of another dtype or shape."""

class CorruptPlan(Error):
    """A plan file cannot be read: damaged bytes, a failed hash, a newer format."""

class RefitRefused(Error):
    """A refit was refused; the plan is unchanged (all or nothing)."""

class Plan:
    def run(
        self, inputs: Dict[str, Any], version: str = ..., device_outputs: bool = ..., device_id: int = ...
    ) -> List[Any]: ...
    def versions(self) -> List[str]: ...
    def drop_version(self, name: str) -> None: ...
    def version_id(self, name: str = ...) -> int: ...
    def generate(
        self,
        prompts: List[List[int]],
        max_new_tokens: int,
        temperature: float,
        top_k: int,
        top_p: float,
        seed: int,
        stop: List[int],
        window: int,
        callback: Optional[Any],
        version: str = ...,
    ) -> Tuple[List[List[int]], List[List[int]]]: ...
    def refit_files(
        self,
        files: Sequence[str],
        mode: str,
        allow_nonfinite: bool,
        keep_baked: bool,
        skip_unchanged: bool,
        strip_prefix: str,
        add_prefix: str,
        version: str,
        lora_path: str,
        lora_tensors: Dict[str, Any],
        lora_config: str,
        lora_scale: float,
        progress: Optional[Callable[[str, int, int, str], None]],
        host_replay: bool = ...,
    ) -> Dict[str, Any]: ...
    def refit_tensors(
        self,
        values: Dict[str, Any],
        checkpoint_names: bool,
        allow_nonfinite: bool,
        incremental: bool,
        keep_baked: bool,
        skip_unchanged: bool,
        strip_prefix: str,
        add_prefix: str,
        version: str,
        lora_path: str,
        lora_tensors: Dict[str, Any],
        lora_config: str,
        lora_scale: float,
        progress: Optional[Callable[[str, int, int, str], None]],
        host_replay: bool = ...,
    ) -> Dict[str, Any]: ...
    def save(
        self, path: str, strip: bool, progress: Optional[Callable[[str, int, int, str], None]] = None
    ) -> None: ...
    def inspect(self) -> str: ...
    def value_infos(self, outputs: bool) -> str: ...
    @property
    def missing(self) -> List[str]: ...
    @property
    def mode(self) -> str: ...
    @property
    def stripped(self) -> bool: ...
    @property
    def device(self) -> str: ...
    @property
    def bound(self) -> bool: ...
    @property
    def path(self) -> Optional[str]: ...

class TextStream:
    def __init__(self, decode: Callable[[List[int]], str], prompt: List[int]) -> None: ...
    def push(self, token: int) -> str: ...
    def finish(self) -> str: ...
    @property
    def text(self) -> str: ...

def check(model: str) -> List[str]: ...
def build(
    model: str,
    mode: str,
    individual: Sequence[str],
    strip: bool,
    literals: Sequence[str],
    precision: str,
    activations: str,
    skip_passes: Sequence[str],
    checkpoint_files: Sequence[str],
    checkpoint_tensors: Optional[Dict[str, Any]],
    binds: Dict[str, str],
    bind_file: str,
    strict_binding: bool,
    allow_partial_binding: bool,
    threads: int,
    device: str,
    allow_cpu_fallback: bool,
    block_size: int,
    allow_nonfinite: bool,
    reference_rounding: bool,
    strip_prefix: str,
    add_prefix: str,
    progress: Optional[Callable[[str, int, int, str], None]],
) -> Plan: ...
def load(path: str, verify: bool, threads: int) -> Plan: ...
def load_timing_cache(path: str, device: str) -> bool: ...
def save_timing_cache(path: str, device: str) -> None: ...
