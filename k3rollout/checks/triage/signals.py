"""The signals triage scores, grouped by family.

A *family* is one failure mechanism (``nccl_error``, ``kv_cache``, ``cuda_driver_too_old``...).
It belongs to one category and holds the messages different tools print for it. Within a
family only the strongest matching signal counts (a log that says the same thing five times
is not five times as sure); across families the scores add (two independent mechanisms
pointing at the same category are stronger than one).

The patterns are the tools' own message texts (CUDA runtime/driver error strings, NVML,
nvidia-container-cli, NCCL, PyTorch, vLLM, SGLang, Ray, Kubernetes), not lines of any one
report, so they hold on logs no rule was written against.

Weights, on one scale:
  4.0  the message names the mechanism and nothing else causes it (error 35, NCCL's
       "remote process exited", "CUDA out of memory").
  3.0  names the mechanism, but another category's failure can print it on the way down.
  2.0  specific to the category, but a symptom rather than the cause.
  1.0  generic: the category is likely, nothing is proven.
  0.5  context only (a hint that one category is in play at all).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Signal:
    family: str
    category: str
    pattern: re.Pattern[str]        # the regex, case-insensitive
    weight: float
    why: str
    # the same regex in lower case, matched case-sensitively against ``fold(line)``: the
    # same matches at the same places (``folded``), ten times faster than ``re.I``, under
    # which Python's regex engine tries every branch at every position of a line
    lower: re.Pattern[str]


# Every character that Python's case-insensitive matching takes for an ASCII letter, as that
# letter in lower case: A-Z, and the four others (U+0130 and U+0131 for i, U+017F for s,
# U+212A KELVIN SIGN for k). tests/unit/test_triage_fold.py checks this against re.I over every
# code point.
FOLD = {**{c: c + 32 for c in range(ord("A"), ord("Z") + 1)},
        0x130: ord("i"), 0x131: ord("i"), 0x17F: ord("s"), 0x212A: ord("k")}


def fold(line: str) -> str:
    """``line`` with every character re.I takes for an ASCII letter replaced by that
    letter in lower case; every other character is kept (same length, same places)."""
    return line.translate(FOLD)


# The typographic quotes that issue titles, word processors and copy-pastes put where a tool printed
# ASCII ones (Docker's `could not select device driver "" with capabilities` quoted as “”), as the
# ASCII quote each stands for: “ ” „ as ", ‘ ’ ‚ as '. The patterns are written with ASCII quotes, so
# the line is read with these replaced before it is folded (docs/domain.md, "How a line's quotes are
# read"); the evidence keeps the line as it was. A step of its own, not part of FOLD: fold keeps to
# what re.I takes for a letter, and none of these is one.
QUOTES = {0x201C: ord('"'), 0x201D: ord('"'), 0x201E: ord('"'), 0x2018: ord("'"), 0x2019: ord("'"),
          0x201A: ord("'")}


def plain_quotes(line: str) -> str:
    """``line`` with its typographic quotes as ASCII ones (same length, same places)."""
    return line.translate(QUOTES)


# a "(?" other than a plain group or a lookaround: inline flags, a named group, a conditional
_GROUP_OPTION = re.compile(r"\(\?(?![:=!]|<[=!])")


def folded(rx: str) -> str:
    """``rx`` (ASCII, no inline flags or named groups) for case-sensitive matching against
    ``fold(line)``: its literal letters in lower case, its escapes (``\\S``, ``\\b``) as they
    are. A pattern ``rx`` matches ``line`` under re.I exactly where ``folded(rx)`` matches
    ``fold(line)``: a literal letter or a letter in a class matches what re.I lets it
    match, every other character is unchanged, and fold keeps which characters are word
    characters (\\w, \\b), digits and spaces."""
    if not rx.isascii() or _GROUP_OPTION.search(rx):
        raise ValueError(f"triage pattern outside what folded() keeps exact: {rx!r}")
    out, i = [], 0
    while i < len(rx):
        if rx[i] == "\\":
            if rx[i + 1] in "xuUN0123456789":
                raise ValueError(f"triage pattern with a numeric or named escape: {rx!r}")
            out.append(rx[i:i + 2])
            i += 2
        else:
            out.append(rx[i].lower())
            i += 1
    return "".join(out)


# (family, category, weight, regex, why). The comment above each family says why it sits in
# its category and why it weighs what it weighs.
_TABLE: list[tuple[str, str, float, str, str]] = [
    # --- driver_incompatible (DOMAIN tree step 1: the host driver cannot run this CUDA) ---
    # CUDA's own verdict that the driver is older than the runtime: decisive, 4.
    ("cuda_driver_too_old", "driver_incompatible", 4.0,
     r"CUDA driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver"
     r"|CUDA_ERROR_INSUFFICIENT_DRIVER", "error 35: the driver is older than the CUDA runtime"),
    ("cuda_driver_too_old", "driver_incompatible", 4.0,
     r"NVIDIA driver on your system is too old|driver version is too old|Your (GPU|CUDA|NVIDIA) driver is too old",
     "PyTorch/framework: the driver is too old for the wheel's CUDA"),
    ("cuda_driver_too_old", "driver_incompatible", 4.0,
     r"driver version \S+ is below the CUDA \d+\.x minimum", "live facts: driver below image CUDA floor"),
    # The container toolkit's NVIDIA_REQUIRE_CUDA check: the runtime raises it, the driver causes it
    # (docs/domain.md, "CUDA toolkit and driver versions"), so it is a driver signal at full weight.
    ("cuda_requirement", "driver_incompatible", 4.0,
     r"unsatisfied condition: (cuda|driver)\s*>=?\s*[\d.]+", "image NVIDIA_REQUIRE_CUDA above the driver"),
    # nvidia-docker 1.0's own check of the image's com.nvidia.cuda.version label against the
    # driver's CUDA version before it starts the container (src/nvidia-docker/utils.go
    # cudaSupported: "unsupported CUDA version: driver %s < image %s"): NVIDIA_REQUIRE_CUDA's
    # ancestor, the same verdict.
    ("cuda_requirement", "driver_incompatible", 4.0,
     r"unsupported CUDA version: driver [\d.]+ < image [\d.]+", "nvidia-docker 1.0: image CUDA above the driver"),
    # 804: a compat libcuda used because the host driver is too old, on a GPU without forward compat.
    ("forward_compat", "driver_incompatible", 4.0,
     r"forward compatibility was attempted on non supported HW|COMPAT_NOT_SUPPORTED_ON_DEVICE"
     r"|cudaErrorCompatNotSupportedOnDevice|Error 804\b", "error 804: forward compat on non-datacenter GPU"),
    # 803 and NVML/kernel API mismatches: user-space and kernel driver disagree. Real driver-level
    # incompatibility; 3.5 because a stale compat lib in the image also prints it (the live facts
    # move it to container_runtime when the driver is known to be new enough).
    ("driver_mismatch", "driver_incompatible", 3.5,
     r"unsupported display driver\s*/\s*cuda driver combination|cudaErrorSystemDriverMismatch"
     r"|SYSTEM_DRIVER_MISMATCH|Error 803\b", "error 803: user-space libcuda does not match the kernel driver"),
    ("driver_mismatch", "driver_incompatible", 3.5,
     r"Driver/library version mismatch|API mismatch: the NVIDIA kernel module has version",
     "NVML: loaded kernel module differs from the user-space driver"),
    # NVML_ERROR_LIB_RM_VERSION_MISMATCH as pynvml raises it (class name and nvmlErrorString text,
    # vllm/third_party/pynvml.py in vLLM 0.33) and as go-nvml names it (pkg/nvml/return.go).
    ("driver_mismatch", "driver_incompatible", 3.5,
     r"NVMLError_LibRmVersionMismatch|RM has detected an NVML/RM version mismatch|ERROR_LIB_RM_VERSION_MISMATCH",
     "NVML: the library and the kernel driver (RM) differ"),
    # The kernel module's own refusal, printed to the kernel log when a user-space component of
    # another version opens it (open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/src/osapi.c:
    # "NVRM: API mismatch: the client '%s' (pid %u) has the version %s, but this kernel module has
    # the version %s"; drivers before the open modules printed "the client has the version").
    ("driver_mismatch", "driver_incompatible", 3.5,
     r"NVRM: API mismatch: the client", "NVRM: a driver component and the kernel module differ"),
    # 222: kernels built by a newer toolchain than the driver's JIT understands.
    ("ptx_toolchain", "driver_incompatible", 4.0,
     r"PTX was compiled with an unsupported toolchain|cudaErrorUnsupportedPtxVersion|UNSUPPORTED_PTX_VERSION",
     "error 222: PTX from a newer CUDA than the driver"),
    # Numba's driver wrapper (numba/cuda/cudadrv/driver.py _check_error: "Call to %s results in %s",
    # raised as CudaAPIError/LinkerError whose text is "[%s] %s" % (code, msg)) names an error code
    # its table may not know as UNKNOWN_CUDA_ERROR; the code 222 is cuda.h's
    # CUDA_ERROR_UNSUPPORTED_PTX_VERSION, the verdict above in numbers: 4. The same LinkerError
    # carries the driver JIT's own log, where its ptxas names the PTX handed to it in memory
    # "application ptx input" ("ptxas application ptx input, line N; fatal : Unsupported .version
    # X; current version is 'Y'"): PTX newer than the driver's JIT takes, 3 (under 218, invalid
    # PTX, the same words). A ptxas run on a file ("ptxas /tmp/x.ptx, line N; fatal : Unsupported
    # .version") is a toolkit ptxas older than its front end, the environment's: not taken.
    ("ptx_toolchain", "driver_incompatible", 4.0, r"\[222\] Call to cu\w+ results in",
     "Numba: CUDA error 222, PTX from a newer CUDA than the driver"),
    ("ptx_toolchain", "driver_incompatible", 3.0, r"ptxas application ptx input, line \d+; fatal\s*: Unsupported \.version",
     "the driver's PTX JIT: PTX from a newer CUDA than the driver"),
    # NVIDIA's NGC images compare the driver with the one the image was built for in their entrypoint
    # (nvidia_entrypoint.sh / entrypoint.d: "ERROR: This container was built for NVIDIA Driver Release
    # ${CUDA_DRIVER_VERSION%.*} or later, but" / "version ${DRIVER_VERSION} was detected and
    # compatibility mode is UNAVAILABLE."; with forward compatibility working it prints "NOTE: Legacy
    # NVIDIA Driver detected.  Compatibility mode ENABLED." instead): the image's CUDA floor above the
    # driver, as NVIDIA_REQUIRE_CUDA, 4. Its CPU check ("This container was built for CPUs supporting
    # at least the AVX instruction set") is not taken.
    ("cuda_requirement", "driver_incompatible", 4.0,
     r"This container was built for NVIDIA Driver Release [\d.]+ or later|was detected and compatibility mode is UNAVAILABLE",
     "NGC entrypoint: the image was built for a newer driver, no forward compatibility"),
    # CUDA error 200 (cuda.h CUDA_ERROR_INVALID_IMAGE, cuGetErrorString "device kernel image is
    # invalid"): the driver refuses a module's image, most often a cubin or fatbinary newer than the
    # driver's loader (a build of a newer toolkit on an older driver); a corrupt module prints it
    # too, so likely, not proven: 2.5, as the bare error 35 below.
    ("cuda_driver_too_old", "driver_incompatible", 2.5,
     r"CUDA_ERROR_INVALID_IMAGE|device kernel image is invalid",
     "CUDA error 200: the driver refuses the module's kernel image"),
    # A bare "error 35" with a CUDA context and no text: likely, not proven.
    ("cuda_driver_too_old", "driver_incompatible", 2.0,
     r"CUDA (error|Error)[ :]*35\b|\berror code 35\b|cuInit.*\b35\b", "CUDA error code 35"),
    # cudarc's generated loader (src/driver/sys/mod.rs and the other sys modules: every entry point
    # resolved with .expect("Expected symbol in library")): the CUDA library found is older than
    # the API the bindings were generated for; for libcuda/nvcuda that is a driver older than the
    # build's CUDA. 2.5: a toolkit library (cuBLAS) older than the bindings prints it too.
    ("cuda_driver_too_old", "driver_incompatible", 2.5, r"Expected symbol in library",
     "cudarc: a CUDA entry point missing from the installed library (driver older than the build)"),

    # CUDA error 36 (driver_types.h cudaErrorCallRequiresNewerDriver, cuda.h
    # CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER; cudaGetErrorString "API call is not supported in the
    # installed CUDA driver"): the runtime calls an entry point the driver is too old to have, 3.5
    # (a compat libcuda in the image can also lack it).
    ("cuda_driver_too_old", "driver_incompatible", 3.5,
     r"API call is not supported in the installed CUDA driver|cudaErrorCallRequiresNewerDriver"
     r"|CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", "error 36: the driver is older than the API the runtime calls"),
    # TensorFlow's and XLA's CUDA diagnostics comparing the loaded kernel module with libcuda
    # (tensorflow/stream_executor/cuda/cuda_diagnostics.cc, now xla/stream_executor/cuda/
    # cuda_diagnostics.cc: LOG(ERROR) "kernel version X does not match DSO version Y -- cannot find
    # working devices in this configuration"): NVML's "Driver/library version mismatch" in
    # TensorFlow's words, 3.5. Read up to "DSO", the raise site's words before the versions, so a
    # line cut after them is still read.
    ("driver_mismatch", "driver_incompatible", 3.5, r"kernel version \S+ does not match DSO\b",
     "TensorFlow/XLA: the kernel module and libcuda differ"),
    # The same diagnostics finding no kernel driver at all (cuda_diagnostics.cc
    # LogDiagnosticInformation: "kernel driver does not appear to be running on this host (%s):
    # /proc/driver/nvidia/version does not exist"): the module is not loaded where the process runs,
    # as NVML's "Driver Not Loaded" (container_runtime, 3, below).
    ("gpu_visibility", "container_runtime", 3.0, r"kernel driver does not appear to be running on this host",
     "TensorFlow/XLA: no NVIDIA kernel driver loaded (/proc/driver/nvidia/version missing)"),
    # XLA's PTX compiler checking the driver against its ptxas (xla/service/gpu/nvptx_compiler.cc,
    # a warning: "The NVIDIA driver's CUDA version is X which is older than the ptxas CUDA version
    # (Y)"). XLA goes on, so it is the driver's age as context, 2 (damped as a warning).
    ("cuda_driver_too_old", "driver_incompatible", 2.0,
     r"The NVIDIA driver's CUDA version is \S+ which is older than the (ptxas|PTX compiler) CUDA version",
     "XLA: the driver is older than the CUDA of its PTX compiler"),

    # A driver entry point missing from the driver's own library, in the dynamic loader's words
    # (glibc elf/dl-lookup.c: "undefined symbol: %s"): the driver API's functions are cu<Object>...
    # (cuda.h: cuInit, cuCtxCreate_v4, cuMemCreate, cuGetProcAddress) and NVML's nvml... (nvml.h:
    # nvmlInit_v2), both served by the driver's libcuda and libnvidia-ml. The caller was built for a
    # newer driver than the one installed, as cudarc's "Expected symbol in library" above, 3 (over
    # the generic "undefined symbol" of a broken Python environment, 2.5). Matching ignores case, so
    # the driver API's objects are listed: the toolkit's libraries (cudaMemcpy, cublasLt..., cudnn...,
    # cufft..., cutensor...) do not match.
    ("cuda_driver_too_old", "driver_incompatible", 3.0,
     r"undefined symbol: (cu(Init|DriverGetVersion|GetProcAddress|GetError|Ctx|Device|Mem|Module|Library|Kernel"
     r"|Func|Launch|Stream|Event|Graph|Link|Pointer|Occupancy|Array|Multicast|Coredump|GreenCtx)\w*|nvml\w+)",
     "a CUDA driver or NVML entry point missing from the installed driver (driver older than the caller)"),

    # NCCL's own check of the driver it loads (NVIDIA/nccl src/misc/cudawrap.cc: "CUDA Driver version
    # found is %d. Minimum requirement is %d", printed by the releases that enforce it): the driver
    # is older than the NCCL build needs, 3.5.
    ("cuda_driver_too_old", "driver_incompatible", 3.5, r"CUDA Driver version found is \d+\. Minimum requirement is",
     "NCCL: the driver is older than NCCL's minimum"),

    # Ollama dropping a CUDA device whose driver is older than its runtime needs (ollama
    # discover/cuda_compat.go: slog.Warn "NVIDIA driver too old" with "required_driver"): Ollama then
    # runs on the CPU. A warning, so 3.5 before damping.
    ("cuda_driver_too_old", "driver_incompatible", 3.5, r"NVIDIA driver too old",
     "Ollama: the NVIDIA driver is older than its CUDA runtime needs"),

    # Julia's CUDA packages comparing the toolkit with the driver's CUDA version: CUDAnative.jl's
    # build and init (JuliaGPU/CUDAnative.jl deps/build.jl, later src/compatibility.jl: error or @warn
    # """CUDA X.Y is not supported by\n your driver (which supports up to A.B)""", the newline in the
    # message itself) and its successor's __init__ (src/CUDAnative.jl, then JuliaGPU/CUDA.jl
    # src/initialization.jl: @warn "You are using CUDA toolkit X with a driver that only supports up
    # to Y", "You are using CUDA X with a driver that only supports up to N.x"): the toolkit is newer
    # than the driver, error 35 in Julia's words, 4.
    ("cuda_driver_too_old", "driver_incompatible", 4.0,
     r"CUDA \d+\.\d+ is not supported by\s+your driver \(which supports up to"
     r"|You are using CUDA (toolkit )?\S+ with a driver that only supports up to",
     "Julia CUDA: the toolkit is newer than the driver supports"),
    # NVIDIA Warp checking the driver before it loads anything (NVIDIA/warp warp/native/cuda_util.cpp
    # init_cuda_driver: "Warp CUDA error: Warp requires CUDA driver %d.%d or higher, but the current
    # driver only supports CUDA %d.%d"): the driver is older than Warp's build, error 35 in its words, 4.
    ("cuda_driver_too_old", "driver_incompatible", 4.0,
     r"Warp requires CUDA driver \d+\.\d+ or higher, but the current driver only supports CUDA",
     "Warp: the driver is older than its build needs"),

    # Numba's driver wrapper binding a driver API entry point the installed libcuda does not export
    # (numba/numba numba/cuda/cudadrv/driver.py Driver._find_api: CudaDriverError
    # MISSING_FUNCTION_ERRMSG "driver missing function: %s.\nRequires CUDA N or above."): the driver
    # is older than the API Numba calls, as the dynamic loader's "undefined symbol: cu...", 3. Only
    # the driver API's cu... names: Numba's ROCm driver (numba/roc/hsadrv/driver.py) prints the same
    # words for its hsa_... functions.
    ("cuda_driver_too_old", "driver_incompatible", 3.0, r"driver missing function: cu\w+",
     "Numba: a CUDA driver API entry point missing from the installed driver"),
    # TensorRT's builder and runtime initialising CUDA (TensorRT Developer Guide, "Understanding Error
    # Messages", Common TensorRT Core Library Error Messages: "CUDA initialization failure with error
    # <code>. Please check the CUDA installation", older releases "Cuda initialization failure with
    # error <code>"): the code is the CUDA runtime's (CUDA Runtime API error types). 35,
    # cudaErrorInsufficientDriver, is the driver older than TensorRT's CUDA, 3.5 as error 36: the
    # verdict in numbers, not words.
    ("cuda_driver_too_old", "driver_incompatible", 3.5, r"CUDA initialization failure with error:? 35\b",
     "TensorRT: CUDA error 35 at init, the driver is older than its CUDA runtime"),
    # Ollama's CUDA discovery naming the two driver verdicts of cuInit in one text (ollama/ollama
    # discover/gpu.go, gpu/gpu.go before 0.5, loadNVCUDAMgmt: for CUDA_ERROR_INSUFFICIENT_DRIVER and
    # CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, slog.Warn "version mismatch between driver and cuda driver
    # library - reboot or upgrade may be required: library %s"): errors 35 and 803, both
    # driver_incompatible here; 3.5, the weight of 803, the weaker of the two.
    ("driver_mismatch", "driver_incompatible", 3.5, r"version mismatch between driver and cuda driver library",
     "Ollama: cuInit answered error 35 or 803 (driver too old or library and module differ)"),

    # --- container_runtime (tree step 2: driver fine, the container/GPU path is broken) ---
    # Docker/containerd has no NVIDIA runtime or device driver: nothing else prints these.
    ("runtime_missing", "container_runtime", 4.0,
     r'could not select device driver "[^"]*" with capabilities|unknown or invalid runtime name: nvidia'
     r"|Unknown runtime specified nvidia|nvidia-container-runtime(-hook)?\S*: (executable file )?not found"
     r'|exec: "nvidia-container-runtime', "no NVIDIA container runtime configured"),
    # nvidia-container-cli failing in the prestart hook. "requirement error" is excluded: that one is
    # the driver's (above); so is an initialization error that passes on NVML's "Driver/library
    # version mismatch" (nvml.h NVML_ERROR_LIB_RM_VERSION_MISMATCH, after "nvml error:"): the hook only
    # relays the driver's own state, which driver_mismatch above reads, as the earlier folders label it.
    ("toolkit_hook", "container_runtime", 3.5,
     r"nvidia-container-cli: (initialization(?! error: nvml error: driver/library version mismatch)|mount|ldcache"
     r"|detection|container) error"
     r"|nvidia-container-cli\S*: (?!requirement|initialization error: nvml error: driver/library version mismatch)"
     r"[a-z ]*error", "nvidia-container-cli failed"),
    ("toolkit_hook", "container_runtime", 1.5,
     r"error running (prestart )?hook|OCI runtime create failed|failed to create shim task",
     "OCI runtime hook failed (generic: the hook's own message decides)"),
    # nvidia-container-runtime's own failure to edit the container spec (nvidia-container-toolkit
    # internal/oci/runtime_modifier.go "could not apply required modification to OCI
    # specification"; the CDI modifier's errors follow it).
    ("toolkit_hook", "container_runtime", 3.5,
     r"could not apply required modification to OCI specification", "nvidia-container-runtime failed"),
    # enroot's GPU hook (NVIDIA/enroot conf/hooks/98-nvidia.sh: common::err "Command not found:
    # nvidia-container-cli, see https://github.com/NVIDIA/libnvidia-container"), which pyxis runs for
    # every GPU job: libnvidia-container is not installed on the node, the container cannot get its
    # GPUs, 4. Apptainer's and SingularityCE's --nvccli run the binary set as "nvidia-container-cli
    # path" in apptainer.conf/singularity.conf; where it is not there Go's os/exec error names it
    # ("exec: %q: %v", the stat error): the same tool missing, 3.5.
    ("toolkit_hook", "container_runtime", 4.0, r"Command not found: nvidia-container-cli",
     "enroot's GPU hook: nvidia-container-cli is not installed"),
    ("toolkit_hook", "container_runtime", 3.5, r'exec: "\S*nvidia-container-cli": stat \S+: no such file or directory',
     "Apptainer --nvccli: nvidia-container-cli is not installed"),
    # The toolkit's other refusals to set a container up (nvidia-container-toolkit):
    # internal/modifier/stable.go (until 2023) "failed to locate NVIDIA Container Runtime Hook"
    # (the runtime is configured, its hook binary is not installed); internal/runtime/runtime.go
    # "failed to create NVIDIA Container Runtime"; cmd/nvidia-container-runtime-hook/
    # hook_config.go "invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the
    # docker --gpus flag) is not supported" (CDI mode with the legacy hook). crun runs OCI hooks
    # itself and names the one that failed (containers/crun src/libcrun/container.c: "error
    # executing hook `%s` (exit code: %d)"): an NVIDIA hook (nvidia-ctk, nvidia-container-
    # runtime-hook, nvidia-container-toolkit) is the toolkit's, any other hook is generic.
    ("toolkit_hook", "container_runtime", 3.5,
     r"failed to locate NVIDIA Container Runtime Hook|failed to create NVIDIA Container Runtime"
     r"|invoking the NVIDIA Container Runtime Hook directly|error executing hook `[^`]*nvidia[^`]*`",
     "the NVIDIA container toolkit could not set the container up"),
    ("toolkit_hook", "container_runtime", 1.5, r"error executing hook `",
     "OCI hook failed (generic: the hook's own message decides)"),
    # LXC running a container's mount hooks (lxc/lxc src/lxc/conf.c lxc_setup: "Failed to run mount
    # hooks", after run_buffer's "Script exited with status N"). LXD's nvidia.runtime and LXC's own
    # hooks/nvidia (which calls nvidia-container-cli) run there, so the GPU setup of the container
    # failed; 2.5, lxcfs's mount hook runs there too.
    ("toolkit_hook", "container_runtime", 2.5, r"Failed to run mount hooks",
     "LXC mount hook failed (nvidia.runtime's hook runs there)"),
    # The hook script itself, in LXC's log format ("<file>:<function>:<line> - <message>"): run_buffer
    # runs each lxc.hook.* script (lxc/lxc src/lxc/conf.c run_buffer, later src/lxc/utils.c: "Script
    # exited with status %d", "Script terminated by signal %d"). Any hook of the container's start,
    # LXD's nvidia.runtime among them, failed: generic, 1.5, as the OCI runtime's "error running hook";
    # the words without LXC's run_buffer prefix are any script's and are not taken.
    ("toolkit_hook", "container_runtime", 1.5, r"run_buffer:\d+ - Script (exited with status|terminated by signal) \d+",
     "LXC hook script failed (generic: the hook's own message decides)"),
    # A Docker client older than 19.03 has no --gpus flag (docker/cli cli/command/container/
    # opts.go added it with API 1.40; the flag parser's own error is spf13/pflag errors.go
    # "unknown flag: --%s"): the GPU cannot reach the container, whatever the driver.
    ("runtime_missing", "container_runtime", 3.5, r"unknown flag: --gpus\b",
     "container CLI without GPU support (--gpus unknown)"),
    # docker-compose 1.x checks the file against its bundled JSON schema before it calls the daemon
    # (docker/compose compose/config/validation.py: a jsonschema Draft4Validator) and prints
    # jsonschema's texts under the key's path and "value": "Additional properties are not allowed
    # ('devices' was unexpected)" or, where the schema admits only extensions, "'devices' does not
    # match any of the regexes: '^x-'". GPU reservations (deploy.resources.reservations.devices)
    # are in the schema from 1.28: an older client cannot ask for a GPU, as "unknown flag: --gpus".
    ("runtime_missing", "container_runtime", 3.5, r"resources\.reservations value .*'devices'",
     "docker-compose without GPU reservations (devices unknown to its schema)"),
    # NVML unreachable inside a container/pod: libraries not injected or cgroup device access lost.
    ("nvml_in_container", "container_runtime", 3.5,
     r"Failed to initialize NVML: (Unknown Error|ERROR_LIBRARY_NOT_FOUND|could not load NVML library)"
     r"|NVML library not found|could not load NVML library|libnvidia-ml\.so(\.1)?: cannot open shared object"
     r"|load library failed: libnvidia-ml|nvml\.so.*not found|libcuda\.so(\.1)?: cannot open shared object",
     "NVML/driver libraries not reachable in the container"),
    # DCGM's host engine, embedded in dcgm-exporter, failing nvmlInit (NVIDIA/DCGM
    # dcgmlib/src/DcgmHostEngineHandler.cpp: log_error("Failed to initialize NVML: {}", ret), older
    # releases without the return code) and the Go binding's start failure that follows
    # (NVIDIA/gpu-monitoring-tools bindings/go/dcgm/admin.go "Error starting nv-hostengine: %s" with
    # dcgmlib/src/dcgm_errors.c's "DCGM initialization error"): the exporter's pod without the
    # driver's libraries or devices, 3. Only the bare text or a numeric code: nvidia-smi's "Failed to
    # initialize NVML: <reason>" names its reason and is read by the reason (above, and 803's table);
    # a logfmt line's closing quote may follow.
    ("nvml_in_container", "container_runtime", 3.0,
     r"Failed to initialize NVML(: -?\d+)?\"?\s*$|Error starting nv-hostengine: DCGM initialization error",
     "DCGM host engine: NVML cannot initialise in the exporter's container"),
    # The same NVML failures as the bindings name them: pynvml raises NVMLError_<Name> with
    # nvmlErrorString's text (vllm/third_party/pynvml.py in vLLM 0.33: "NVML Shared Library Not
    # Found", "Unknown Error"); go-nvml (device plugin, GPU Operator, HAMi) prints the return
    # code's name when the library cannot say (pkg/nvml/return.go: ERROR_UNKNOWN...). Unknown
    # Error inside a container is its cgroup losing the device nodes (nvidia-container-toolkit #48).
    ("nvml_in_container", "container_runtime", 3.5,
     r"NVMLError_LibraryNotFound|NVML Shared Library Not Found|NVMLError_Unknown\b"
     r"|NVML.*\bERROR_(UNKNOWN|LIBRARY_NOT_FOUND)\b", "NVML unreachable in the container"),
    # The kernel module is not loaded where the container runs: pynvml NVMLError_DriverNotLoaded
    # ("Driver Not Loaded"), go-nvml ERROR_DRIVER_NOT_LOADED, nvml-wrapper DriverNotLoaded. Like
    # "Found no NVIDIA driver" below: GPUs not visible, 3 (the host driver, not its version).
    # nvidia-persistenced failing at start (NVIDIA/nvidia-persistenced nvidia-persistenced.c
    # setup_devices: syslog "Failed to query NVIDIA devices. Please ensure that the NVIDIA device
    # files (/dev/nvidia*) exist, and that user %u has read and write permissions for those files.";
    # its parent, "nvidia-persistenced failed to initialize. Check syslog for more details."): the
    # driver's device nodes are missing or closed to it where it runs. A symptom of a node whose
    # driver is not up, and printed at boots that recover, 2.
    ("gpu_visibility", "container_runtime", 2.0,
     r"Failed to query NVIDIA devices\. Please ensure that the NVIDIA device files"
     r"|nvidia-persistenced failed to initialize", "nvidia-persistenced: no usable NVIDIA device files"),
    ("gpu_visibility", "container_runtime", 3.0,
     r"NVMLError_DriverNotLoaded|ERROR_DRIVER_NOT_LOADED|\bDriverNotLoaded\b|NVML.*Driver Not Loaded",
     "NVML: no NVIDIA kernel driver loaded"),
    # The Kubernetes device plugin / GPU Operator telling the node has no usable GPU runtime.
    ("device_plugin", "container_runtime", 3.5,
     r"did you configure the NVIDIA Container Toolkit|Incompatible strategy detected|"
     r"No devices found\. Waiting indefinitely|nvidia-container-runtime.*not.*default runtime"
     r"|Insufficient nvidia\.com/gpu|failed to get device plugin|device plugin.*(failed|error)",
     "Kubernetes device plugin cannot see or advertise GPUs"),
    # The device plugin gives up building its resource managers (k8s-device-plugin's plugin factory,
    # internal/plugin/factory.go: "failed to construct resource managers: %w"; before 0.15 the
    # main loop's "failed to construct NVML resource managers"): no strategy found GPUs on the node
    # (NVML or the toolkit's libraries not in the plugin's container), as "Incompatible strategy".
    ("device_plugin", "container_runtime", 3.5, r"failed to construct (NVML )?resource managers",
     "Kubernetes device plugin cannot see or advertise GPUs"),
    # CDI: device names the runtime cannot resolve.
    ("cdi", "container_runtime", 4.0,
     r"unresolvable CDI devices|failed to inject CDI devices|CDI device injection failed"
     r"|failed to (resolve|create) CDI|cdi\.k8s\.io.*(not found|unresolvable)|(error )?setting up CDI devices"
     r"|failed to stat CDI host device", "CDI device resolution failed"),
    # A CDI device name (vendor/class=name, container-device-interface pkg/parser/parser.go) given to
    # a runtime that takes every --device for a host path: podman before 4.1 stats it
    # (pkg/specgen/generate/config_linux.go DevicesFromPath, Go's os error "stat %s: no such file or
    # directory"). The runtime cannot resolve the CDI name, as "unresolvable CDI devices": 3.5.
    ("cdi", "container_runtime", 3.5, r"stat [\w.-]+\.[a-z]+/[\w.-]+=[\w.,:-]+: no such file or directory",
     "a CDI device name read as a host path (runtime without CDI)"),
    # The framework found no GPU at all. In a container that the driver could serve, this is
    # the runtime not passing GPUs; 3 because a host without a loaded driver prints it too.
    ("gpu_visibility", "container_runtime", 3.0,
     r"no CUDA-capable device is detected|Found no NVIDIA driver on your system|No CUDA GPUs are available"
     r"|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|Failed to infer device type|Device string must not be empty"
     r"|torch\.cuda\.is_available\(\)\s*(is|returned|=)\s*False|NVIDIA-SMI has failed because it couldn't communicate"
     r"|CUDA driver initialization failed|no NVIDIA GPU device is present|nvidia-smi: (command )?not found",
     "GPUs not visible to the process"),
    # CUDA error 46 (cudaErrorDevicesUnavailable, CUDA_ERROR_DEVICES_UNAVAILABLE; cudaGetErrorString
    # "all CUDA-capable devices are busy or unavailable"): the GPUs are there but this process may
    # not use them (exclusive-process compute mode held by another job, a scheduler handing out a
    # GPU that is taken). The GPU path, not the driver's version or the model: 3, as no device.
    ("gpu_visibility", "container_runtime", 3.0,
     r"all CUDA-capable devices are busy or unavailable|cudaErrorDevicesUnavailable|CUDA_ERROR_DEVICES_UNAVAILABLE",
     "GPUs present but not available to this process"),
    # nvidia-smi absent from the container: the runtime injected no driver utilities (no GPU
    # runtime, or NVIDIA_DRIVER_CAPABILITIES without "utility"). The OCI runtime reports it in Go's
    # os/exec words (lp_unix.go ErrNotFound "executable file not found in $PATH", exec.go
    # Error "exec: %q: ..."). The quoted name is Go's %q and stays when a title or an event cuts the
    # "exec: " before it (runc's '"nvidia-smi": executable file not found in $PATH: unknown').
    ("gpu_visibility", "container_runtime", 3.0, r'"nvidia-smi": executable file not found',
     "nvidia-smi not in the container"),
    # The same, in crun's words (containers/crun src/libcrun/container.c: "executable file `%s` not
    # found in $PATH"), which podman prints when nothing injected the driver (`--gpus` without the
    # toolkit's hook or a CDI device).
    ("gpu_visibility", "container_runtime", 3.0, r"executable file `nvidia-smi` not found",
     "nvidia-smi not in the container"),
    # libcuda not found where a program looks for it: cudarc, the Rust CUDA bindings under candle and
    # mistral.rs, panics with "Unable to dynamically load the \"cuda\" shared library - searched for
    # library names: [...]" (src/lib.rs panic_no_lib_found) when no libcuda is on the library path,
    # a container the runtime gave no driver libraries or a path that misses them. As "libcuda.so:
    # cannot open shared object" above: 3.5. The same panic for nccl or cublas names other libraries.
    ("nvml_in_container", "container_runtime", 3.5,
     r'Unable to dynamically load the "?(cuda|nvcuda|nvidia-ml|nvml)"? shared library',
     "cudarc: libcuda not on the library path"),
    # The same for NVIDIA's Python bindings of the driver API, under RAPIDS (cuDF, cuML), Numba and
    # CuPy's helpers: cuda-python's loader (NVIDIA/cuda-python cuda/_cuda/ccuda.pyx.in cuPythonInit,
    # later cuda/bindings/_bindings/cydriver.pyx.in: RuntimeError "Failed to dlopen libcuda.so",
    # then "Failed to dlopen libcuda.so.1") finds no driver library where the process runs, an image
    # started without the NVIDIA runtime or a path that misses the injected files. As "libcuda.so.1:
    # cannot open shared object" above, 3.5. libcudart (the toolkit's, in the image) does not match.
    ("nvml_in_container", "container_runtime", 3.5, r"Failed to dlopen libcuda\.so",
     "cuda-python: the driver's libcuda cannot be loaded"),
    # CUDA's "initialization error" (cuGetErrorString of CUDA_ERROR_NOT_INITIALIZED) after "cuda
    # error": nvidia-container-cli's own CUDA call in the prestart hook (libnvidia-container
    # src/driver.c call_cuda -> src/error.c error_set_cuda: "cuda error: %s"; with the CLI's prefix
    # the toolkit_hook signal above decides), or a framework's first CUDA call. CUDA did not start
    # where the driver is loaded: step 2, a symptom, 2.
    ("gpu_visibility", "container_runtime", 2.0, r"cuda error\W{1,3}initialization error",
     "CUDA init failed (initialization error)"),
    # 802: NVSwitch systems without a matching fabric manager.
    ("fabric_manager", "container_runtime", 3.5,
     r"Error 802\b|system not yet initialized|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY"
     r"|nvidia-fabricmanager.*(fail|error|mismatch)", "error 802: fabric manager / system not ready"),
    # The kernel driver cannot bring the GPU up or has lost it (open-gpu-kernel-modules:
    # src/nvidia/arch/nvalloc/unix/src/osinit.c "RmInitAdapter failed!" and "GPU has fallen off
    # the bus."; osapi.c "... has fallen off the bus and is not responding to commands";
    # kernel-open/nvidia/nv.c "NVRM: No NVIDIA GPU found.", "The NVIDIA probe routine was not
    # called for / failed for N device(s)"). The tree has no hardware branch: the driver is loaded
    # and new enough, yet CUDA finds no working GPU, which is step 2's GPU visibility. 3: the
    # cause is the node, but a GPU lost mid-run also kills a load or a collective on the way.
    ("gpu_unreachable", "container_runtime", 3.0,
     r"RmInitAdapter failed|fallen off the bus|NVRM: No NVIDIA GPU found"
     r"|The NVIDIA probe routine (was not called|failed) for", "kernel driver cannot initialise or reach the GPU"),
    # The kernel driver refusing a GPU it does not drive (open-gpu-kernel-modules
    # src/nvidia/arch/nvalloc/unix/src/osapi.c, rm_is_supported_device: "NVRM: The NVIDIA GPU ...
    # (PCI ID: ...)" / "NVRM: installed in this system is not supported by open" / "NVRM: nvidia.ko
    # because it does not include the required GPU System Processor (GSP)." for a GPU without GSP
    # under the open modules, its vGPU twin, and "installed in this system is not supported by the" /
    # "NVIDIA %s driver release." for a GPU the release dropped; older releases put the version on
    # the first line, "not supported by the 337.25"). The module is loaded and no GPU comes up, as
    # the probe failure above: step 2, 3 (heldout13's precedent puts the GSP refusal there).
    ("gpu_unreachable", "container_runtime", 3.0,
     r"NVRM: installed in this system is not supported by (open|the)\b",
     "kernel driver: this GPU is not supported by the loaded module or release"),
    # A device node the container was given does not exist on the host (nvidia-uvm is created on
    # first use, so it is often missing after a reboot). moby oci/devices_linux.go: "error
    # gathering device information while adding custom device %q"; nvidia-container-toolkit
    # pkg/system/nvdevices/devices.go "failed to create device node"; Go's os errors for a
    # missing path ("stat|lstat /dev/nvidia-uvm: no such file or directory").
    ("device_nodes", "container_runtime", 3.5,
     r'error gathering device information while adding custom device "?/dev/nvidia'
     r"|(stat|lstat|open) /dev/nvidia[\w-]*: no such file or directory|failed to create device node nvidia",
     "an NVIDIA device node is missing on the host"),
    # LXD creating an instance's device node from the host's (canonical/lxd, lxd/device unix device
    # setup: "Failed to create device %q for %q: %w"): the GPU device cannot be passed in.
    ("device_nodes", "container_runtime", 3.5, r'Failed to create device "[^"]*" for "/dev/nvidia',
     "an NVIDIA device node cannot be created for the container"),
    # LXC mounting the device files LXD prepared for a GPU device into the container (lxc/lxc
    # src/lxc/conf.c mount_entry: "Failed to mount \"%s\" on \"%s\""; LXD keeps them as
    # devices/<instance>/unix.gpuN.dev-nvidia*): an NVIDIA device file that does not reach the
    # container, as the device node above, 3.5. A mount of anything but an NVIDIA device file is not
    # taken.
    ("device_nodes", "container_runtime", 3.5, r'Failed to mount "[^"]*dev[-/]nvidia[^"]*" on "',
     "LXC: an NVIDIA device file cannot be mounted into the container"),
    # Device nodes or sockets not accessible: rootless, cgroups, SELinux.
    ("device_permissions", "container_runtime", 3.0,
     r"permission denied.*(/dev/nvidia|docker\.sock|nvidia-container)"
     r"|(/dev/nvidia\S*).*(permission denied|Operation not permitted)"
     r"|rootless.*(nvidia|gpu|cgroup)|no-cgroups|cgroup.*devices.*(not found|denied)", "device or socket permissions"),
    # NVML_ERROR_NO_PERMISSION (pynvml "Insufficient Permissions", go-nvml ERROR_NO_PERMISSION)
    ("device_permissions", "container_runtime", 3.0,
     r"NVMLError_NoPermission|ERROR_NO_PERMISSION\b|NVML.*Insufficient Permissions", "NVML: no permission"),
    # NVML_ERROR_OPERATING_SYSTEM: pynvml "The operating system has blocked the request."
    # (vllm/third_party/pynvml.py in vLLM 0.33), nvidia-smi "Failed to initialize NVML: GPU access
    # blocked by the operating system" (a container or VM denied the device). 3, as a permission.
    ("device_permissions", "container_runtime", 3.0,
     r"NVMLError_OperatingSystem|operating system has blocked the request|GPU access blocked by the operating system",
     "NVML: the operating system blocked GPU access"),
    # nvidia-smi's own texts when NVML cannot serve it: the library was not injected into the
    # container ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system"), or the device
    # nodes are there but not usable ("No devices were found"; "Unable to determine the device
    # handle for GPU<bus id>: Unknown Error", which a container prints when its cgroup lost the
    # devices, nvidia-container-toolkit #48). pynvml's NVML_ERROR_GPU_IS_LOST ("GPU is lost",
    # NVMLError_GpuIsLost) is the GPU gone from the bus: the node's, tree step 2, as "fallen off
    # the bus" above.
    ("nvml_in_container", "container_runtime", 3.5,
     r"NVIDIA-SMI couldn't find libnvidia-ml\.so", "nvidia-smi: NVML library not in the container"),
    ("gpu_visibility", "container_runtime", 3.0,
     r"^No devices were found$|Unable to determine the device handle for GPU",
     "nvidia-smi: NVML sees no usable GPU"),
    ("gpu_unreachable", "container_runtime", 3.0, r"NVMLError_GpuIsLost|\bGPU is lost\b",
     "NVML: the GPU is lost (off the bus)"),
    # Image could not be pulled or verified.
    ("image_pull", "container_runtime", 2.5,
     r"manifest unknown|pull access denied|failed to register layer|digest mismatch|ErrImagePull|ImagePullBackOff"
     r"|no space left on device.*(layer|overlay|extract)", "image pull / integrity"),
    # A binary in the image built for another CPU architecture: the kernel's ENOEXEC text, as runc
    # reports it when the container's entrypoint will not execute ("standard_init_linux.go: exec
    # user process caused: exec format error"). Image integrity, step 2; 2.5, a symptom.
    ("image_pull", "container_runtime", 2.5, r"exec format error", "image built for another CPU architecture"),
    # CUDA asked for a device count and failed: container or driver, the follow-up line decides.
    ("gpu_visibility", "container_runtime", 1.0,
     r"Unexpected error from cudaGetDeviceCount|CUDA unknown error|cuInit.*(failed|error)",
     "CUDA init failed (generic)"),
    # PyTorch's own text for CUDA error 999 at init (c10/cuda/CUDAFunctions.cpp: "CUDA unknown
    # error - this may be due to an incorrectly set up environment, e.g. changing env variable
    # CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero."). The
    # driver answered (an old driver is error 35, a mismatched one 803) but its devices are not
    # usable from here: /dev/nvidia-uvm missing, a container that lost its device cgroup after a
    # daemon reload or a host reboot. GPU visibility, tree step 2; 3, as "no CUDA-capable device".
    ("gpu_visibility", "container_runtime", 3.0,
     r"CUDA unknown error - this may be due to an incorrectly set up environment",
     "CUDA init failed with an unknown error (device nodes or cgroup)"),
    # The same 999 from the driver API's first call, by its enum name (CUDA's cuda.h CUDA_ERROR_UNKNOWN,
    # what cuGetErrorName returns), as FFmpeg prints it (libavutil/cuda_check.h ff_cuda_check: "%s
    # failed" then " -> %s: %s" with the error's name and string): cuInit answered, then failed. 3.
    ("gpu_visibility", "container_runtime", 3.0, r"cuInit\S* failed\W+CUDA_ERROR_UNKNOWN",
     "cuInit failed with CUDA_ERROR_UNKNOWN (device nodes or cgroup)"),
    # slurmd's NVML autodetection on a GPU whose MIG mode is on with no MIG instance created
    # (SchedMD/slurm src/plugins/gpu/nvml/gpu_nvml.c: fatal "MIG mode is enabled, but no MIG devices
    # were found. Please either create MIG instances, disable MIG mode, ..."): the node's GPUs
    # cannot be handed out, tree step 2's GPU visibility, 3.5.
    ("gpu_visibility", "container_runtime", 3.5, r"MIG mode is enabled, but no MIG devices were found",
     "MIG mode on with no MIG instances"),
    # TensorFlow's loader not finding the driver's libcuda (tensorflow/stream_executor/dso_loader.cc:
    # LOG(INFO) "Couldn't open CUDA library " << path): the toolkit's libraries are in the image, the
    # driver's are not (a GPU image run without the NVIDIA runtime). Logged at INFO; 3.5 before the
    # level's damping, as "libcuda.so.1: cannot open shared object" above. A toolkit library
    # (libcudnn, libcupti) is the image's own business and does not match.
    ("nvml_in_container", "container_runtime", 3.5, r"Couldn't open CUDA library (libcuda\.so|nvcuda\.dll)",
     "TensorFlow: the driver's libcuda not found"),
    # The NVIDIA kernel module does not build or load for the running kernel. The tree has no
    # install branch: the driver's version is not the fault, the node has no working driver, so
    # CUDA cannot start with a version that would do (step 2, as "couldn't communicate with the
    # NVIDIA driver" after a kernel update). The texts: NVIDIA's installer (nvidia-installer
    # kernel.c: "An error occurred while performing the step: \"Building kernel modules\"",
    # "Unable to load the kernel module 'nvidia.ko'", "Unable to find the kernel source tree for
    # the currently running kernel"); the kernel's modpost (scripts/mod/modpost.c:
    # "GPL-incompatible module %s.ko uses GPL-only symbol '%s'"), which stops the build when a
    # new kernel marks a symbol the driver needs GPL-only; DKMS (dkms.in: "Bad return status for
    # module build on kernel: %s (%s)"). DKMS builds other modules too: 3 there, 3.5 where the
    # message names NVIDIA's module or NVIDIA's installer prints it.
    ("driver_build", "container_runtime", 3.5,
     r'An error occurred while performing the step: "Building kernel modules"'
     r"|Unable to load the kernel module '?nvidia|Unable to find the kernel source tree for the currently running"
     r"|GPL-incompatible module nvidia[\w-]*\.ko uses GPL-only symbol", "NVIDIA kernel module does not build or load"),
    # NVIDIA's installer finding a module of the old driver still loaded that it cannot unload
    # (nvidia-installer kernel.c check_for_unloaded_kernel_module: ui_error "An NVIDIA kernel module
    # '%s' appears to already be loaded in your kernel.  This may be because it is in use (for
    # example, by an X server, a CUDA program, or the NVIDIA Persistence Daemon)"): the installation
    # stops, the new driver is not installed, as "Unable to load the kernel module", 3.5. The
    # installer's "The Nouveau kernel driver is currently in use by your system" (kernel.c
    # check_for_nouveau) is not taken: the corpus labels its one log driver_incompatible, a doubtful
    # label against this family's precedent.
    ("driver_build", "container_runtime", 3.5,
     r"An NVIDIA kernel module '?[\w-]+'? appears to already be loaded in your kernel",
     "NVIDIA installer: the old driver's module is still loaded, the new one is not installed"),
    ("driver_build", "container_runtime", 3.0,
     r"Bad return status for module build on kernel|GPL-incompatible module \S+\.ko uses GPL-only symbol",
     "kernel module build failed (DKMS / modpost)"),
    # Distribution package hooks that run DKMS and report in their own words: Void Linux's
    # xbps-triggers (srcpkgs/xbps-triggers/files/dkms: "DKMS module '<name>-<version>' failed to
    # build, please check /var/lib/dkms", "... failed to install"). 3.5 where the module is
    # NVIDIA's, 3 for any other, as dkms.in's text above.
    ("driver_build", "container_runtime", 3.5, r"DKMS module '?nvidia[\w.-]*'? failed to (build|install)",
     "NVIDIA kernel module does not build or load"),
    ("driver_build", "container_runtime", 3.0, r"DKMS module '?\S+'? failed to (build|install)",
     "kernel module build failed (DKMS)"),
    # DKMS refusing a module whose source tree has no dkms.conf (dkms.in read_conf: die 4 "Could not
    # locate dkms.conf file." "File: %s does not exist."), a stale or half-removed driver package: the
    # module is not rebuilt for the kernel, 3 as dkms.in's build failure (any module), 3.5 where the
    # path is NVIDIA's module's.
    ("driver_build", "container_runtime", 3.0, r"Could not locate dkms\.conf file",
     "DKMS: a module source without dkms.conf is not built"),
    ("driver_build", "container_runtime", 3.5, r"/var/lib/dkms/nvidia[\w.-]*/\S+/dkms\.conf does not exist",
     "DKMS: the NVIDIA module's source has no dkms.conf"),

    # CUDA error 34 (cudaErrorStubLibrary, CUDA_ERROR_STUB_LIBRARY; cudaGetErrorString "CUDA driver
    # is a stub library"): the toolkit's link-time stub libcuda (lib64/stubs) was loaded instead of
    # the driver's, because the runtime did not inject the driver's libraries or a path puts the stub
    # first. The driver's libraries are not reachable in the container, as "libcuda.so: cannot open
    # shared object": 3.5.
    ("nvml_in_container", "container_runtime", 3.5,
     r"CUDA driver is a stub library|cudaErrorStubLibrary|CUDA_ERROR_STUB_LIBRARY",
     "error 34: the CUDA stub library was loaded instead of the driver's libcuda"),
    # NVIDIA Warp meeting that stub (NVIDIA/warp warp/native/cuda_util.cpp init_cuda_driver, after
    # dlopen("libcuda.so") and cuGetProcAddress: "Warp CUDA error: Failed to get driver entry point
    # '%s' (CUDA error %u)", then the warning "Warp CUDA warning: Unable to determine CUDA driver
    # version" when cuDriverGetVersion cannot be had or fails). With code 34 the stub is named, 3.5
    # as above. The warning alone: a libcuda that loads and cannot answer its own version, which a
    # driver's library always can (one older than cuGetProcAddress stops Warp earlier, "Failed to get
    # function cuGetProcAddress"), so the stub or a broken copy of it, 2.5. Another code (500, an
    # entry point newer than the driver) is not this.
    ("nvml_in_container", "container_runtime", 3.5, r"Failed to get driver entry point '\w+' \(CUDA error 34\)",
     "Warp: the CUDA stub library was loaded instead of the driver's libcuda"),
    ("nvml_in_container", "container_runtime", 2.5, r"Unable to determine CUDA driver version",
     "Warp: the libcuda it loaded cannot report its version (the stub, most likely)"),
    # The dynamic loader finding a driver library that is shorter than an ELF header (glibc
    # elf/dl-load.c open_verify: "file too short", printed as "error while loading shared libraries:
    # %s: file too short" or in Python's ImportError): an empty libcuda or libnvidia-* file in the
    # image, the mount point the NVIDIA runtime leaves and binds the host's library over (an image
    # committed from a running GPU container, or built with the nvidia runtime as the default), run
    # without that runtime, most often. The driver's libraries are not reachable in the container, 3. A
    # toolkit or TensorRT library (libcudnn, libnvinfer) the image carries itself is not matched.
    ("nvml_in_container", "container_runtime", 3.0, r"\blib(cuda|nvidia-[\w-]+)\.so[.\d]*: file too short",
     "an empty NVIDIA driver library in the image (the runtime's mount point without the runtime)"),
    # CUDA errors 805-810 (driver_types.h cudaErrorMpsConnectionFailed ... cudaErrorMpsClientTerminated,
    # cuda.h CUDA_ERROR_MPS_*; cudaGetErrorString 805 "MPS client failed to connect to the MPS control
    # daemon or the MPS server"): CUDA_MPS_PIPE_DIRECTORY points at an MPS daemon that is not
    # running or not reachable from the container. The GPU path, not the driver's version: 3.
    ("cuda_mps", "container_runtime", 3.0,
     r"MPS client failed to connect to the MPS control daemon|cudaErrorMps\w+|CUDA_ERROR_MPS_\w+",
     "CUDA MPS: the MPS control daemon or server cannot be reached"),
    # Frameworks finding no GPU in their own words, as "No CUDA GPUs are available" above:
    #   PyTorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp TORCH_CHECK "ProcessGroupNCCL is
    #     only supported with GPUs, no GPUs found!" (3.5: the NCCL backend asked, no GPU there)
    #   PyTorch Lightning lightning/fabric/connector.py and pytorch/trainer/connectors/
    #     accelerator_connector.py "`CUDAAccelerator` can not run on your system since the
    #     accelerator is not available" (GPUAccelerator in older releases)
    #   TensorFlow tsl/cuda/cudart_stub.cc "Could not find cuda drivers on your machine, GPU will not
    #     be used." (logged at INFO)
    #   JAX jax/_src/xla_bridge.py "Unable to initialize backend 'cuda': FAILED_PRECONDITION: No
    #     visible GPU devices."
    #   Ollama discover/gpu.go slog.Info "no compatible GPUs were discovered" (INFO: context, 2)
    ("gpu_visibility", "container_runtime", 3.5, r"ProcessGroupNCCL is only supported with GPUs, no GPUs found",
     "PyTorch: the NCCL process group found no GPU"),
    ("gpu_visibility", "container_runtime", 3.0,
     r"`?(CUDA|GPU)Accelerator`? can not run on your system since the accelerator is not available"
     r"|Could not find cuda drivers on your machine|FAILED_PRECONDITION: No visible GPU devices",
     "framework: no GPU visible (Lightning, TensorFlow, JAX)"),
    ("gpu_visibility", "container_runtime", 2.0, r"no compatible GPUs were discovered",
     "Ollama: no usable GPU found (runs on the CPU)"),
    # Apptainer/SingularityCE `--nv` binding the host's driver libraries and tools listed in
    # etc/nvliblist.conf into the container ("Could not find any nv files on this host!", "Could
    # not find any nv libraries on this host!"; SingularityCE 3.x's legacy --nv path in
    # internal/pkg/runtime/launcher "Could not find any Nvidia libraries on this host!", Singularity
    # 3.0's "Could not find any NVIDIA libraries"): no driver files where the container runs, so the
    # GPU cannot reach it. 3, and a warning where it is printed as one. Its "Could not find any NVIDIA
    # binaries on this host!" is logged at INFO (nvidia-smi absent alone) and is not taken.
    ("nvml_in_container", "container_runtime", 3.0, r"Could not find any (nv|nvidia) (files|libraries) on this host",
     "Apptainer --nv: no NVIDIA driver files on the host to bind"),
    # slurmctld refusing a node whose slurmd found fewer GPUs than slurm.conf declares
    # (SchedMD/slurm src/common/gres.c: "%s count reported lower than configured (%"PRIu64" < %"PRIu64")"
    # with gres/gpu, the node drained INVALID_REG): slurmd sees no GPU or fewer (NVML absent, devices
    # gone), tree step 2's GPU visibility, 3.
    ("gpu_visibility", "container_runtime", 3.0, r"gres/gpu count reported lower than configured",
     "Slurm: the node reports fewer GPUs than configured"),
    # The same reason as `sinfo -R` (--list-reasons) prints it: its default format (SchedMD/slurm
    # src/sinfo/opts.c, "%20E %9u %19H %N", doc/man/man1/sinfo.1) cuts the reason to a 20-character
    # column, "gres/gpu count repor", then the user. Cut there and followed by the column's space,
    # 3 as the whole text.
    ("gpu_visibility", "container_runtime", 3.0, r"gres/gpu count repor(\s|$)",
     "Slurm: the node reports fewer GPUs than configured (sinfo -R's cut reason)"),
    # The kubelet's device manager admitting a pod to a GPU the device plugin does not offer
    # (kubernetes pkg/kubelet/cm/devicemanager/manager.go: "requested number of devices unavailable
    # for %s. Requested: %d, Available: %d", "no healthy devices present; cannot allocate unhealthy
    # devices %s", wrapped by pkg/kubelet/lifecycle "Allocate failed due to %v, which is
    # unexpected"): the plugin's GPUs are unhealthy or gone, 3.
    ("device_plugin", "container_runtime", 3.0,
     r"requested number of devices unavailable for nvidia\.com/|no healthy devices present; cannot allocate unhealthy"
     r" devices nvidia\.com/", "kubelet: the device plugin has no healthy GPU to allocate"),
    # NVIDIA's driver container and k8s-driver-manager (NVIDIA/gpu-driver-container nvidia-driver
    # _unload_driver, NVIDIA/k8s-driver-manager): "Could not unload NVIDIA driver kernel modules,
    # driver is in use". The node's old module stays loaded and the new driver cannot replace it;
    # the manager retries after draining, so 2.5.
    ("driver_build", "container_runtime", 2.5, r"Could not unload NVIDIA driver kernel modules",
     "GPU Operator: the old NVIDIA module is still in use"),

    # More CUDA error codes of the GPU path (driver_types.h / cuda.h, with cudaGetErrorString's text):
    #   102 cudaErrorDeviceNotLicensed "device doesn't have valid Grid license" (a vGPU without its
    #       licence: the GPU is there and may not be used, 3)
    #   221 cudaErrorJitCompilerNotFound "PTX JIT compiler library not found" (the driver's
    #       libnvidia-ptxjitcompiler not in the container: NVIDIA_DRIVER_CAPABILITIES without
    #       compute, 3)
    #   214 cudaErrorECCUncorrectable "uncorrectable ECC error encountered" (the GPU's memory is
    #       failing: the node's GPU, as "fallen off the bus", 3)
    ("gpu_visibility", "container_runtime", 3.0,
     r"device doesn't have valid Grid license|cudaErrorDeviceNotLicensed|CUDA_ERROR_DEVICE_NOT_LICENSED",
     "CUDA error 102: the vGPU has no valid licence"),
    ("nvml_in_container", "container_runtime", 3.0,
     r"PTX JIT compiler library not found|cudaErrorJitCompilerNotFound|CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
     "CUDA error 221: the driver's PTX JIT library is not in the container"),
    ("gpu_unreachable", "container_runtime", 3.0,
     r"uncorrectable ECC error encountered|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE",
     "CUDA error 214: uncorrectable ECC error on the GPU"),
    # The GPU needing a reset or its GSP firmware not answering: NVML_ERROR_RESET_REQUIRED (nvml.h;
    # pynvml NVMLError_ResetRequired "GPU requires restart", nvidia-smi "[GPU requires reset]") and
    # the kernel driver's Xid 119 (open-gpu-kernel-modules src/nvidia, GSP_RPC_TIMEOUT_XID_MESSAGE_FMT
    # "Timeout after %llus of waiting for RPC response from GPU%u GSP!"). The node's GPU, tree step 2 as "fallen off the bus", 3.
    ("gpu_unreachable", "container_runtime", 3.0,
     r"GPU requires (reset|restart)|NVMLError_ResetRequired|ERROR_RESET_REQUIRED"
     r"|of waiting for RPC response from GPU\d* GSP", "the GPU needs a reset (NVML) or its GSP stopped answering"),
    # kmod's modprobe refusing the NVIDIA module (kmod tools/modprobe.c: "could not insert '%s': %s"
    # with strerror, e.g. "Key was rejected by service" under Secure Boot; "Module %s not found in
    # directory %s" when no module was built for the running kernel): the node has no
    # working driver, as "Unable to load the kernel module 'nvidia.ko'" above, 3.5. nvidia-peermem is
    # not the driver: it is GPUDirect RDMA's bridge to the InfiniBand stack (below, step 4).
    ("driver_build", "container_runtime", 3.5,
     r"could not insert 'nvidia(?![_-]peermem)[\w-]*'|Module nvidia[\w-]* not found in directory",
     "the NVIDIA kernel module does not load for the running kernel"),
    # RPM Fusion's fallback unit (rpmfusion/xorg-x11-drv-nvidia nvidia-fallback.service, run when
    # /sys/module/nvidia is absent at boot: plymouth message "NVIDIA kernel module missing. Falling
    # back to nouveau"): the module was not built by akmods or was refused (Secure Boot), so the node
    # has no working driver, as modprobe's refusal above; 3, it does not say which.
    ("driver_build", "container_runtime", 3.0, r"NVIDIA kernel module missing\W+falling back to nouveau",
     "Fedora/RPM Fusion: the NVIDIA kernel module did not load at boot"),

    # containerd's CRI plugin asked for a RuntimeClass handler it has no runtime for (containerd
    # internal/cri server sandbox_run.go: "failed to get sandbox runtime: no runtime for %q is
    # configured"): the nvidia handler is not in containerd's config, as Docker's "unknown or
    # invalid runtime name: nvidia", 4.
    ("runtime_missing", "container_runtime", 4.0, r'no runtime for "nvidia[\w-]*" is configured',
     "containerd: no nvidia runtime handler configured"),
    # DeepSpeed's launcher counting the GPUs before it starts anything (deepspeed/launcher/runner.py:
    # "Unable to proceed, no GPU resources available"): none visible to the process, 3.
    ("gpu_visibility", "container_runtime", 3.0, r"Unable to proceed, no GPU resources available",
     "DeepSpeed: no GPU visible to the launcher"),

    # CRI-O asked for a RuntimeClass handler it has no runtime for (cri-o internal/config: "failed to
    # find runtime handler %s from runtime list %v"), CRI-O's form of containerd's "no runtime for
    # \"nvidia\" is configured", 4.
    ("runtime_missing", "container_runtime", 4.0, r"failed to find runtime handler nvidia",
     "CRI-O: no nvidia runtime handler configured"),
    # The Kubernetes device plugin's health check taking a GPU out of service on a critical Xid
    # (NVIDIA/k8s-device-plugin internal/rm/health.go: "XidCriticalError: Xid=%d on Device=%s;
    # marking device as unhealthy.", older releases "... All devices will go unhealthy."): the node's
    # GPU failed, as "fallen off the bus", 3.
    ("gpu_unreachable", "container_runtime", 3.0,
     r"XidCriticalError: Xid=\d+( on Device=\S+; marking device as unhealthy|, All devices will go unhealthy)",
     "device plugin: a GPU marked unhealthy on a critical Xid"),

    # The container toolkit unable to describe the node's devices (nvidia-container-toolkit
    # cmd/nvidia-ctk/cdi/generate and pkg/nvcdi: "failed to generate CDI spec", "error generating CDI
    # specification"; the CDI modifier's "could not resolve CDI devices"), or to find an IMEX channel
    # a multi-node NVLink container asks for (internal/discover: "IMEX channel %s not found at %s").
    ("cdi", "container_runtime", 3.0,
     r"failed to generate CDI spec|error generating CDI specification|could not resolve CDI devices",
     "NVIDIA toolkit: no CDI description of the node's GPUs"),
    ("device_nodes", "container_runtime", 3.0, r"IMEX channel \S+ not found",
     "NVIDIA toolkit: the IMEX channel device is missing"),
    # NCCL opening NVML itself (src/os/linux.cc: "Failed to open libnvidia-ml.so.1: %s"): the
    # driver's NVML library is not in the container, 3.
    ("nvml_in_container", "container_runtime", 3.0, r"Failed to open libnvidia-ml\.so",
     "NCCL: the driver's NVML library is not reachable"),

    # The device plugin's other refusals and health verdicts (NVIDIA/k8s-device-plugin, file beside
    # each):
    #   cmd/nvidia-device-plugin/main.go  "If this is a GPU node, did you set the docker default runtime
    #       to `nvidia`?" (the plugin's container got no NVML: 3.5, as the toolkit question above)
    #   internal/rm/health.go  "'%s' device marked unhealthy: %s", "Marking device %v as unhealthy",
    #       "... Marking all devices as unhealthy" (a GPU left service, 2.5: the plugin also marks
    #       devices it merely cannot watch)
    #   internal/plugin/mps, cmd/mps-control-daemon  "Failed to start MPS daemon", "Failed to start
    #       one or more MPS deamons" (the sharing daemon the pods need, 3, as CUDA's MPS errors)
    #   internal/rm  "at least one device with migEnabled=true was not configured correctly",
    #       "device %v has no MIG devices configured" (MIG on without instances, 3, as slurmd's)
    ("device_plugin", "container_runtime", 3.5, r"did you set the docker default runtime to `?nvidia",
     "Kubernetes device plugin cannot see or advertise GPUs"),
    ("gpu_unreachable", "container_runtime", 2.5,
     r"device marked unhealthy|Marking device \S+ as unhealthy|Marking all devices as unhealthy",
     "device plugin: a GPU marked unhealthy"),
    ("cuda_mps", "container_runtime", 3.0, r"Failed to start (MPS daemon|one or more MPS dea?e?mons)",
     "device plugin: the MPS daemon did not start"),
    ("gpu_visibility", "container_runtime", 3.0,
     r"device with migEnabled=true was not configured correctly|device \S+ has no MIG devices configured",
     "device plugin: MIG mode on without MIG devices"),

    # slurmd's NVML autodetection finding no GPU list at all (SchedMD/slurm src/plugins/gpu/nvml/
    # gpu_nvml.c gpu_p_get_system_gpu_list: "System GPU detection failed"): the node reports no
    # GPU, as "gres/gpu count reported lower", 3.
    ("gpu_visibility", "container_runtime", 3.0, r"System GPU detection failed",
     "Slurm: slurmd's GPU autodetection failed"),

    # slurmd asked for NVML autodetection (gres.conf AutoDetect=nvml) by a Slurm built without NVML
    # (SchedMD/slurm src/interfaces/gpu.c, src/common/gpu.c before 23.02: "We were configured to
    # autodetect nvml functionality, but we weren't able to find that lib when Slurm was
    # configured."): the node's GPUs are not detected, 3 as above.
    ("gpu_visibility", "container_runtime", 3.0,
     r"configured to autodetect nvml functionality, but we weren't able to find that lib",
     "Slurm: NVML autodetection asked of a slurmd built without NVML"),

    # Kubernetes' RuntimeClass admission plugin refusing a pod whose runtimeClassName names no
    # RuntimeClass object (plugin/pkg/admission/runtimeclass/admission.go: "pod rejected:
    # RuntimeClass %q not found"): a pod asking for the nvidia class on a cluster where the GPU
    # Operator or its chart never created it, so no GPU runtime is configured for it, 3.5.
    ("runtime_missing", "container_runtime", 3.5, r'RuntimeClass "?nvidia[\w-]*"? not found',
     "Kubernetes: no nvidia RuntimeClass for the pod"),
    # The scheduler's taint filter (kubernetes pkg/scheduler/framework/plugins/tainttoleration:
    # "node(s) had untolerated taint {%s: %s}") naming the GPU nodes' own taint: the pod cannot land
    # on a GPU node, the Kubernetes GPU path, 2.5 (a pod that never asked for a GPU shows it too).
    ("device_plugin", "container_runtime", 2.5, r"untolerated taint \{nvidia\.com/gpu\b",
     "Kubernetes: the pod does not tolerate the GPU nodes' taint"),
    # NVIDIA Fabric Manager (nvidia-fabricmanager, documented in its user guide and its log at
    # /var/log/fabricmanager.log: "[ERROR] detected number of NVSwitches don't match with any
    # supported system topology, aborting fabric manager"): an NVSwitch missing or failed, the
    # fabric manager does not start and CUDA answers error 802, 3.5 as 802.
    ("fabric_manager", "container_runtime", 3.5,
     r"detected number of NVSwitches don't match with any supported system topology",
     "Fabric Manager: the NVSwitch topology does not match, it does not start"),

    # Triton's CUDA driver module looking for the driver's libcuda.so.1 (triton
    # python/triton/backends/nvidia/driver.py libcuda_dirs: assert "libcuda.so cannot found!"): the
    # driver's library is neither in ldconfig's cache nor on LD_LIBRARY_PATH in the container, as
    # "libcuda.so.1: cannot open shared object", 3 (TRITON_LIBCUDA_PATH can point elsewhere).
    ("nvml_in_container", "container_runtime", 3.0, r"libcuda\.so cannot found",
     "Triton: the driver's libcuda is not found in the container"),
    # nvidia-smi creating MIG GPU instances ("Unable to create a GPU instance on GPU %d using profile
    # %s: %s", "Failed to create GPU instances: %s", with NVML's reason: Insufficient Resources, In
    # use by another client, Invalid Argument): the MIG layout the pods expect does not exist, tree
    # step 2's GPU visibility, 3.
    ("gpu_visibility", "container_runtime", 3.0,
     r"Unable to create a GPU instance on GPU|Failed to create GPU instances:",
     "nvidia-smi: the MIG instances could not be created"),

    # NVIDIA's NGC images check for the driver in their entrypoint (nvidia_entrypoint.sh and
    # /opt/nvidia/entrypoint.d: no libcuda.so.1 outside compat or no /dev/nvidiactl -> "WARNING: The
    # NVIDIA Driver was not detected.  GPU functionality will not be available."): the container was
    # started without the GPU runtime (no --gpus, no nvidia RuntimeClass), 3, counted as the warning
    # it is printed as.
    ("gpu_visibility", "container_runtime", 3.0,
     r"The NVIDIA Driver was not detected\.\s+GPU functionality will not be available",
     "NGC image: no NVIDIA driver passed into the container"),
    # The kernel driver's Xid texts for a GPU whose memory failed (open-gpu-kernel-modules: Xid 48
    # "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer ...", Xid 95
    # "Uncontained: <unit>. RST: Yes, D-RST: No", an error the driver could not contain to one
    # process, the GPU needs a reset): the node's GPU, as "fallen off the bus" and CUDA error 214, 3.
    # Xid 63 (ECC_ROW_REMAP_PENDING_*_XID_MESSAGE_FMT "Row Remapper: New row ... marked for remapping,
    # reset gpu to activate.") is corrected memory waiting for a reset, 2. Xid 94 ("Contained: ...
    # RST: No") ends only the process that touched the memory and is not taken.
    ("gpu_unreachable", "container_runtime", 3.0,
     r"uncorrectable double bit error \(DBE\) has been detected on GPU|\bUncontained: .*\bRST: Yes",
     "Xid 48/95: uncorrectable memory error, the GPU needs a reset"),
    ("gpu_unreachable", "container_runtime", 2.0, r"Row Remapper: New row .*marked for remapping, reset gpu to activate",
     "Xid 63: a memory row remapped, pending a GPU reset"),

    # The GPU Operator's driver container finding no kernel headers for the running kernel
    # (NVIDIA/gpu-driver-container nvidia-driver _resolve_kernel_version: "Could not resolve Linux
    # kernel version"): the module cannot be built, the node has no working driver, 3.5 as DKMS's.
    ("driver_build", "container_runtime", 3.5, r"Could not resolve Linux kernel version",
     "GPU Operator: no kernel headers to build the NVIDIA module"),
    # The driver container installing the running kernel's headers with dnf (OpenShift/RHEL images of
    # NVIDIA/gpu-driver-container: "dnf -q -y install kernel-headers-${KERNEL_VERSION}
    # kernel-devel-..."), which the repositories do not carry (dnf/cli/commands/install.py:
    # PackagesNotAvailableError(_("Unable to find a match"), pkg_spec=...), printed "Error: Unable to
    # find a match: %s"): the module cannot be built, 3.5 as "Could not resolve Linux kernel version".
    ("driver_build", "container_runtime", 3.5, r"Unable to find a match: kernel-(headers|devel)-\S+",
     "driver container: no kernel headers package for the running kernel"),
    # Slurm refusing a GPU request its configuration has no GRES for (src/common/slurm_errno.c
    # ESLURM_INVALID_GRES "Invalid generic resource (gres) specification"): gres/gpu not configured
    # on the cluster or the partition, the scheduler's GPU path, 2.5 (a typo in --gres prints it too).
    ("gpu_visibility", "container_runtime", 2.5, r"Invalid generic resource \(gres\) specification",
     "Slurm: no GPU GRES for the request"),

    # enroot running its hooks (NVIDIA/enroot src/common.sh common::runparts: common::err "${file}
    # exited with return code $?", printed "[ERROR] ..."; pyxis relays enroot's log into the Slurm
    # job's): a hook whose name is NVIDIA's (conf/hooks/98-nvidia.sh, the one that runs
    # nvidia-container-cli) failed, the container did not get its GPUs, 3.5 as crun naming the
    # nvidia hook. Another hook (99-mellanox.sh, 10-cgroups.sh) is not taken.
    ("toolkit_hook", "container_runtime", 3.5, r"hooks\.d/\S*nvidia\S*\.sh exited with return code \d+",
     "enroot: the NVIDIA hook failed"),
    # The same hook finding the unified-memory module absent (conf/hooks/98-nvidia.sh: common::log WARN
    # "Kernel module nvidia_uvm is not loaded. Make sure the NVIDIA device driver is installed and
    # loaded."): enroot runs nvidia-container-cli in a user namespace, which loads no module, so the
    # container has no /dev/nvidia-uvm and CUDA cannot start in it, 3, counted as the warning it is.
    ("device_nodes", "container_runtime", 3.0,
     r"Kernel module nvidia_uvm is not loaded\. Make sure the NVIDIA device driver is installed",
     "enroot: nvidia_uvm not loaded, the container gets no /dev/nvidia-uvm"),
    # NVIDIA_DRIVER_CAPABILITIES holding a value the GPU setup does not know: enroot's hook
    # (conf/hooks/98-nvidia.sh: common::err "Unknown NVIDIA driver capability: ${cap}") and
    # Apptainer's --nvccli (apptainer/apptainer internal/pkg/util/gpu/nvidia.go NVCLIEnvToFlags:
    # "unknown NVIDIA_DRIVER_CAPABILITIES value: %s"). The container is refused its GPU setup, 3.
    ("toolkit_hook", "container_runtime", 3.0,
     r"Unknown NVIDIA driver capability: |unknown NVIDIA_DRIVER_CAPABILITIES value: ",
     "enroot/Apptainer: NVIDIA_DRIVER_CAPABILITIES has a value the GPU setup does not know"),
    # Apptainer refusing to run nvidia-container-cli for --nvccli (internal/pkg/runtime/launch/
    # launcher_linux.go: "--fakeroot does not support --nvccli in set-uid installations";
    # internal/pkg/util/gpu/nvidia.go: errNvCCLIInsecure "nvidia-container-cli is not owned by root
    # user"): the GPU setup does not run, 3.5 as the binary missing.
    ("toolkit_hook", "container_runtime", 3.5,
     r"--fakeroot does not support --nvccli in set-uid installations|nvidia-container-cli is not owned by root user",
     "Apptainer --nvccli: nvidia-container-cli refused"),
    # libnvidia-container under WSL2 (NVIDIA/libnvidia-container src/nvc.c nvc_init: libdxcore loaded,
    # then error_setx "WSL environment detected but no adapters were found"): WSL exposes no GPU
    # adapter to Linux (no WSL-capable Windows driver, or GPU-PV off), so no container gets one,
    # 3.5. Its debug log's "dxcore initialization failed, continuing assuming a non-WSL environment"
    # is printed on every Linux host and is not taken.
    ("gpu_visibility", "container_runtime", 3.5, r"WSL environment detected but no adapters were found",
     "libnvidia-container: WSL2 exposes no GPU adapter"),
    # nvidia-container-cli not on the PATH of whatever runs it: the toolkit's legacy prestart hook
    # (NVIDIA/nvidia-container-toolkit cmd/nvidia-container-runtime-hook/main.go getCLIPath:
    # log.Panicf "couldn't find binary nvidia-container-cli in PATH: %v"), 4 as enroot's "Command not
    # found: nvidia-container-cli"; containerd's GPU option, which nerdctl and ctr use (containerd/
    # containerd contrib/nvidia/nvidia.go WithGPUs: exec.LookPath's error, Go's os/exec "exec: %q:
    # executable file not found in $PATH"), 3.5 as Apptainer's stat error above.
    ("toolkit_hook", "container_runtime", 4.0, r"couldn't find binary nvidia-container-cli in PATH",
     "the NVIDIA runtime hook: nvidia-container-cli is not installed"),
    ("toolkit_hook", "container_runtime", 3.5, r'exec: "\S*nvidia-container-cli": executable file not found',
     "containerd --gpus: nvidia-container-cli is not installed"),
    # Docker with CDI enabled looking for a GPU vendor's CDI spec for --gpus (moby/moby daemon/
    # devices.go getFirstAvailableVendor: "no known GPU vendor found", wrapped by daemon/
    # devices_amd_linux.go as "failed to discover GPU vendor from CDI: %w"): neither nvidia.com nor
    # amd.com specs exist, the toolkit is not installed or its spec not generated, 3.5 (it names no
    # vendor, where "could not select device driver" names the request).
    ("runtime_missing", "container_runtime", 3.5, r"no known GPU vendor found",
     "Docker: no GPU vendor's CDI spec for --gpus"),
    # Numba's driver loader finding no libcuda (numba/numba numba/cuda/cudadrv/driver.py find_driver:
    # CudaSupportError DRIVER_NOT_FOUND_MSG "CUDA driver library cannot be found.", raised as "Error at
    # driver init: ..."): the driver's library is not where the process runs, as cudarc's "Unable to
    # dynamically load the \"cuda\" shared library", 3 (`numba -s` prints it on a host with no GPU
    # too). Its libNVVM ("libNVVM cannot be found", numba/cuda/cudadrv/nvvm.py) is the toolkit's, not
    # the driver's, and is not taken.
    ("nvml_in_container", "container_runtime", 3.0, r"CUDA driver library cannot be found",
     "Numba: the driver's libcuda not found"),
    # TensorRT's CUDA initialisation failure (TensorRT Developer Guide, above) with CUDA error 100,
    # cudaErrorNoDevice: no GPU visible to the process, as "no CUDA-capable device is detected", 3.
    ("gpu_visibility", "container_runtime", 3.0, r"CUDA initialization failure with error:? 100\b",
     "TensorRT: CUDA error 100 at init, no GPU visible"),
    # Ollama's CUDA discovery on cuInit's error 999 (ollama/ollama discover/gpu.go loadNVCUDAMgmt: for
    # CUDA_ERROR_UNKNOWN, slog.Warn "unknown error initializing cuda driver library %s: %s. see
    # .../troubleshooting.md"): the driver answered and its devices are not usable (nvidia_uvm
    # stale after a suspend, a container's lost device cgroup), as cuInit's CUDA_ERROR_UNKNOWN, 3.
    ("gpu_visibility", "container_runtime", 3.0, r"unknown error initializing cuda driver library",
     "Ollama: cuInit failed with CUDA error 999 (device nodes or cgroup)"),
    # The GPU Operator's validator (NVIDIA/gpu-operator cmd/nvidia-validator/main.go validateComponent:
    # "error validating driver installation: %w", "error validating toolkit installation: %w",
    # "error validating cuda workload: %w" (the CUDA sample pod that does not run), "error validating
    # plugin installation: %w"; Plugin.validateGPUResource: "GPU resources are not discovered by the
    # node", "unable to find any allocatable GPU resource"): the node's driver, container toolkit or
    # device plugin does not work, the operands wait on it, 3. Its main prints the error with logrus'
    # Printf ("Error: %v"), at INFO: where that key is kept the line's level damps it to context
    # (docs/domain.md, "How a line's level is read"). Its validation of nvidia-peermem, MOFED or
    # GDRCopy ("error validating nvidia-peermem driver installation") is the RDMA stack's and is not
    # taken.
    ("device_plugin", "container_runtime", 3.0,
     r"error validating (driver|toolkit|plugin) installation|error validating cuda workload"
     r"|GPU resources are not discovered by the node|unable to find any allocatable GPU resource",
     "GPU Operator validator: the node's driver, toolkit, device plugin or a CUDA workload not ready"),
    # The driver container generating the running kernel's version string from the kernel package it
    # downloaded (NVIDIA/gpu-driver-container nvidia-driver _install_prerequisites: "Could not locate
    # Linux kernel version string"): no kernel image for the running kernel in the repositories, the
    # module cannot be built, 3.5 as "Could not resolve Linux kernel version".
    ("driver_build", "container_runtime", 3.5, r"Could not locate Linux kernel version string",
     "GPU Operator: no kernel package to build the NVIDIA module"),

    # The kubelet's dockershim, the CRI of Kubernetes up to 1.23, knows no runtime handler but
    # Docker's own (kubernetes/kubernetes pkg/kubelet/dockershim/docker_sandbox.go RunPodSandbox:
    # "RuntimeHandler %q not supported"): a pod whose RuntimeClass names the nvidia handler on a node
    # still on dockershim gets no GPU runtime, as containerd's "no runtime for \"nvidia\"", 4.
    ("runtime_missing", "container_runtime", 4.0, r'RuntimeHandler "nvidia[\w-]*" not supported',
     "dockershim: the nvidia runtime handler is not supported"),
    # The kubelet resolving a pod's RuntimeClass (pkg/kubelet/runtimeclass/runtimeclass_manager.go
    # LookupRuntimeHandler: the lister's NotFound, apimachinery's "%s %q not found" with
    # "runtimeclass.node.k8s.io"): the nvidia RuntimeClass does not exist where the pod landed, as the
    # admission plugin's "RuntimeClass \"nvidia\" not found", 3.5.
    ("runtime_missing", "container_runtime", 3.5, r'runtimeclass(es)?\.node\.k8s\.io "nvidia[\w-]*" not found',
     "kubelet: no nvidia RuntimeClass for the pod"),
    # The kubelet's own admission refusing a pod the scheduler placed (pkg/kubelet/lifecycle/
    # predicate.go InsufficientResourceError: "Node didn't have enough resource: %s, requested: %d,
    # used: %d, capacity: %d", reason "OutOf%s"): for nvidia.com/gpu the node's allocatable GPUs
    # dropped under it (the device plugin restarted or lost its GPUs), as the scheduler's
    # "Insufficient nvidia.com/gpu", 3.
    ("device_plugin", "container_runtime", 3.0, r"Node didn't have enough resource: nvidia\.com/|OutOfnvidia\.com/",
     "kubelet: the node no longer has the GPUs the pod was scheduled on"),
    # The driver manager the driver daemonset runs as its init container (NVIDIA/k8s-driver-manager
    # cmd/driver-manager/main.go: "failed to cleanup NVIDIA driver: %w", "failed to uninstall nvidia
    # driver components: %w") unable to take the old driver off the node before the new one installs,
    # as "Could not unload NVIDIA driver kernel modules", 2.5.
    ("driver_build", "container_runtime", 2.5,
     r"failed to cleanup NVIDIA driver|failed to uninstall nvidia driver components",
     "GPU Operator driver manager: the old driver cannot be removed"),
    # pyxis importing the job's image through enroot (NVIDIA/pyxis pyxis_slurmstepd.c: "pyxis: failed to
    # import docker image: %s") and enroot's registry requests (NVIDIA/enroot src/common.sh
    # common::curl: "URL %s returned error code: %s %s"): the image is not fetched, refused (401, 403)
    # or absent (404), tree step 2's image integrity as "pull access denied", 2.5. pyxis's "container
    # start failed with error code" is not taken: an image's entrypoint prints it too, and enroot's
    # hook line before it says which.
    ("image_pull", "container_runtime", 2.5,
     r"pyxis: failed to import docker image|URL \S+ returned error code: (401|403|404)\b",
     "pyxis/enroot: the image cannot be fetched"),
    # Slurm's GRES devices (SchedMD/slurm src/interfaces/gres.c _set_gres_device_desc, earlier
    # src/common/gres.c gres_device_major: "%s: stat(%s): %m") when gres.conf names a /dev/nvidia*
    # file the node does not have, as Go's "stat /dev/nvidia0: no such file or directory", 3.5; its
    # GPU plugin then stops slurmd (src/plugins/gres/gpu/gres_gpu.c: fatal "%s failed to load
    # configuration" with "Gres GPU plugin"), the node's GPUs are not served, 3.
    ("device_nodes", "container_runtime", 3.5, r"stat\(/dev/nvidia[\w-]*\): No such file or directory",
     "Slurm: a GPU device file of gres.conf is missing"),
    ("gpu_visibility", "container_runtime", 3.0, r"Gres GPU plugin failed to load configuration",
     "Slurm: slurmd's GPU GRES configuration does not load"),
    # Slurm's device constraint for the job's GRES (src/plugins/task/cgroup/task_cgroup_devices.c:
    # "Could not apply device constrain to job", "... to step", "... to task %u", "Unable to set access
    # constraint for device %s(%s)"; task_cgroup.c "failure enabling device enforcement: %s"): the
    # cgroup (or cgroup v2's eBPF program) that lets the step reach its GPUs is not set, 2.5 (the
    # GRES devices are not all GPUs).
    ("device_permissions", "container_runtime", 2.5,
     r"Could not apply device constrain to (job|step|task)|Unable to set access constraint for device"
     r"|failure enabling device enforcement",
     "Slurm: the cgroup device constraint for the job's GPUs is not applied"),
    # slurmctld finding the GPUs a node reports unlike its configuration (src/interfaces/gres.c
    # _check_node_links: "... If using AutoDetect the amount of GPUs configured in slurm.conf does not
    # match what was detected. ...", the node set down with that reason): as "gres/gpu count reported
    # lower than configured", 2.5 (a gres.conf written wrong prints it too).
    ("gpu_visibility", "container_runtime", 2.5,
     r"If using AutoDetect the amount of GPUs configured in slurm\.conf does not match what was detected",
     "Slurm: the node's detected GPUs do not match its configuration"),

    # --- model_load_capacity (tree step 3: CUDA up, the model does not load or fit) ---
    ("gpu_memory", "model_load_capacity", 4.0,
     r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation"
     r"|CUDA_ERROR_OUT_OF_MEMORY|RESOURCE[_ ]EXHAUSTED: Out of memory|out of memory allocating"
     r"|Cuda failure '?out of memory",
     "out of GPU memory"),
    # XLA's RESOURCE_EXHAUSTED above also in the older status text, the code's name in words
    # (tensorflow/core/lib/core/error_codes and status.cc: "Resource exhausted: %s", as jaxlib printed
    # it before absl::Status), and the PJRT client's failed replica (xla/pjrt/
    # pjrt_stream_executor_client.cc, earlier tensorflow/compiler/xla/python/local_client.cc:
    # "Execution of replica %d failed: %s") carrying that status: the program does not fit the
    # device's memory, 4.
    ("gpu_memory", "model_load_capacity", 4.0,
     r"Execution of replica \d+ failed: RESOURCE[_ ]EXHAUSTED", "XLA/PJRT: a replica ran out of device memory"),
    # XLA's device allocator refusing a buffer (xla/stream_executor/stream_executor_memory_allocator.cc
    # Allocate: absl::ResourceExhaustedError "Failed to allocate request for %s (%uB) on device
    # ordinal %d"), under JAX as XlaRuntimeError: the device's memory is spent, 4.
    ("gpu_memory", "model_load_capacity", 4.0, r"Failed to allocate request for \S+ \(\d+B\) on device ordinal",
     "XLA: a device buffer could not be allocated"),
    # TensorRT's error reporter ("[file::function::line] Error Code N: Kind (detail)", the ErrorCode of
    # NvInferRuntimeBase.h, kOUT_OF_MEMORY = 2, "OutOfMemory") and its allocator's warning "Requested
    # amount of GPU memory (N bytes) could not be allocated. There may not be enough free memory for
    # allocation to succeed." (TensorRT Developer Guide, troubleshooting): an engine build or load
    # that does not fit, 4 and 3. TensorRT-LLM's CUDA check (cpp/include/tensorrt_llm/common/
    # cudaUtils.h check(): "[TensorRT-LLM][ERROR] CUDA runtime error in %s: %s" with
    # cudaGetErrorString) on an allocation that ran out: "CUDA runtime error in
    # ::cudaMallocAsync(...): out of memory", 4.
    ("gpu_memory", "model_load_capacity", 4.0,
     r"Error Code 2: OutOfMemory|CUDA runtime error in \S.*: out of memory",
     "TensorRT / TensorRT-LLM: out of GPU memory"),
    # TurboMind, LMDeploy's engine (InternLM/lmdeploy src/turbomind/utils/cuda_utils.h check(): "CUDA
    # runtime error: " + cudaGetErrorString + file:line, logged or thrown with its "[TM][ERROR] "
    # prefix), and FasterTransformer before it (NVIDIA/FasterTransformer src/fastertransformer/utils/
    # cuda_utils.h check(): "[FT][ERROR] CUDA runtime error: "): cudaErrorMemoryAllocation's "out of
    # memory" on an allocation, 4 as TensorRT-LLM's.
    ("gpu_memory", "model_load_capacity", 4.0, r"\[(TM|FT)\]\[ERROR\] CUDA runtime error: out of memory",
     "TurboMind / FasterTransformer: out of GPU memory"),
    # TensorRT's exceptions as its library and its open plugins log them (NVIDIA/TensorRT
    # plugin/common/checkMacrosPlugin.cpp, later plugin/vc/, TRTException::log: "<file> (<line>) -
    # <Kind> Error in <function>: <status> (<message>)", CudaError's kind "Cuda", the status a
    # cudaError_t and the message cudaGetErrorString's): status 2 is cudaErrorMemoryAllocation, "out of
    # memory", an engine build or load that does not fit, 4. Its other CUDA statuses are not memory.
    ("gpu_memory", "model_load_capacity", 4.0, r"Cuda Error in \S+: 2 \(out of memory\)",
     "TensorRT: a CUDA allocation ran out of GPU memory"),
    # Caffe2's CUDA check (pytorch/pytorch caffe2/core/common_gpu.h CUDA_ENFORCE: "Error at: " __FILE__
    # ":" __LINE__ ": " cudaGetErrorString(error), raised from caffe2/core/context_gpu.cu's allocator
    # among others): cudaErrorMemoryAllocation's "out of memory", 4. Its other CUDA errors are not it.
    ("gpu_memory", "model_load_capacity", 4.0, r"Error at: \S+:\d+: out of memory",
     "Caffe2: a CUDA allocation ran out of GPU memory"),
    ("gpu_memory", "model_load_capacity", 3.0,
     r"Requested amount of GPU memory \(\d+ bytes\) could not be allocated",
     "TensorRT: a GPU allocation could not be made"),
    ("gpu_memory", "model_load_capacity", 2.5,
     r"Not enough memory|insufficient (GPU )?memory|memory (is )?not enough"
     r"|exceeds (the )?(available|total) (GPU )?memory"
     r"|not enough (GPU|device) memory|Free memory on device .* is less than desired GPU memory utilization",
     "memory below what the model needs"),
    # vLLM 0.33's own raise sites for memory at load (file beside each):
    #   v1/worker/gpu_model_runner.py  "Failed to load model - not enough GPU memory."
    #   v1/worker/utils.py             "Free memory on device ... on startup is less than desired GPU
    #                                  memory utilization" / "... than the engine's budget", and
    #                                  "Externally held weights on device ... exceed the desired GPU
    #                                  memory utilization" (another process holds the memory: 3)
    #   v1/worker/gpu_worker.py        "Error in memory profiling" (others sharing the GPU released
    #                                  memory during profiling: a symptom, 2)
    ("gpu_memory", "model_load_capacity", 4.0,
     r"Failed to load model - not enough GPU memory", "vLLM: the weights do not fit in GPU memory"),
    ("gpu_memory", "model_load_capacity", 3.0,
     r"Free memory on device .* is less than (desired GPU memory utilization|the engine's budget)"
     r"|Externally held weights on device .* exceed the desired GPU memory utilization",
     "vLLM: free GPU memory at start below the requested utilization"),
    ("gpu_memory", "model_load_capacity", 2.0, r"Error in memory profiling", "vLLM: GPU memory changed under profiling"),
    # vLLM 0.33's load-time budgets other than the weights (file beside each):
    #   config/compilation.py           "max_num_seqs (N) exceeds available Mamba cache blocks (M)":
    #                                   a hybrid model (K3's KDA layers) gets one recurrent-state
    #                                   block per sequence, and the memory left holds fewer
    #   multimodal/gpu_ipc_memory.py    "... but only X GiB is available for the KV cache"
    # Not a signal: v1/engine/core_client.py's "Timed out waiting for engine core processes to start.
    # This is often caused by slow weight loading": a head whose workers never joined prints it too.
    ("kv_cache", "model_load_capacity", 4.0,
     r"exceeds available Mamba cache blocks|only \S+ GiB is available for the KV cache",
     "vLLM: the memory left does not hold the cache the launch asks for"),
    # llama.cpp/ggml (the engine under Ollama, llamafile, LM Studio): ggml/src/ggml-cuda/ggml-cuda.cu
    # "allocating %.2f MiB on device %d: cudaMalloc failed: %s", then llama's "unable to allocate
    # CUDA0 buffer" (src/llama-model.cpp). The weights or KV cache do not fit: 4, as CUDA OOM.
    ("gpu_memory", "model_load_capacity", 4.0,
     r"cudaMalloc failed: out of memory|unable to allocate CUDA\d* buffer",
     "ggml: the model's buffers do not fit in GPU memory"),
    # ggml's CUDA_CHECK before its "current device" form (ggml-cuda.cu "CUDA error %d at %s:%d: %s",
    # here cudaErrorMemoryAllocation 2, "out of memory"): CUDA OOM in other words, 4. And ggml's
    # pinned host buffer (ggml-cuda.cu ggml_cuda_host_malloc "failed to allocate %.2f MiB of pinned
    # memory: %s"): the model's host-side copy does not fit either; ggml goes on with pageable
    # memory, so 2.5, a symptom of a model larger than the machine.
    ("gpu_memory", "model_load_capacity", 4.0, r"CUDA error \d+ at \S+: out of memory",
     "ggml: CUDA out of memory"),
    ("host_memory", "model_load_capacity", 2.5, r"failed to allocate [\d.]+ \w+ of pinned memory",
     "ggml: the model's pinned host buffer does not fit"),
    ("kv_cache", "model_load_capacity", 4.0,
     r"No available memory for the cache blocks|larger than the maximum number of tokens that can be stored in KV cache"
     r"|(is|are) (needed|required) to store .*KV cache|KV cache .*(is )?(needed|required).*(larger|exceeds|available)"
     r"|Insufficient memory for KV cache|not enough KV cache"
     r"|max_num_batched_tokens.*(smaller|larger) than max_model_len"
     r"|Not enough memory for the KV cache|kv cache pool.*(too small|not enough)"
     r"|max_total_num_tokens.*(too small|<=? ?0)"
     r"|(no|not enough|insufficient) (GPU )?memory (left )?for (the )?KV cache",
     "KV cache does not fit"),
    # vLLM 0.33 v1/core/kv_cache_planning.py: the two ValueErrors of the KV cache check and the
    # auto-fit's own ("To serve at least one request with the model's max seq len (N), (X GiB KV
    # cache is needed, which is larger than the available KV cache memory (Y GiB)").
    ("kv_cache", "model_load_capacity", 4.0,
     r"KV cache is needed, which is larger than the available KV cache memory|Cannot auto-fit max_model_len"
     r"|To serve at least one request with the model's max seq len", "vLLM: KV cache does not fit"),
    ("parallel_layout", "model_load_capacity", 3.5,
     r"number of required GPUs exceeds the total number of available GPUs|is not divisible by"
     r"|must be divisible by|should be divisible by|not evenly divisible|Total number of attention heads .* must be"
     r"|Tensor parallel size .* (exceeds|greater)|world_size .* (exceeds|greater than)", "parallel layout does not divide the model"),
    # vLLM 0.33's layout checks against the GPUs there are:
    #   config/parallel.py       "World size (N) is larger than the number of available GPUs (M) in this node"
    #   v1/executor/ray_utils.py "The number of required GPUs exceeds the total number of available
    #                            GPUs in the placement group" (any device kind)
    #   v1/engine/utils.py       "Not enough total available nodes (N) and devices per node",
    #                            "Not enough resources to allocate N DP ranks", "world_size (N) must
    #                            be a multiple of number of devices per node"
    #   config/model.py          "`--decode-context-parallel-size` (N) exceeds the maximum supported value"
    #   engine/arg_utils.py      "Invalid data-parallel launch options: `--nnodes N` must evenly divide the
    #                            total world size (W)" (a multi-node launch whose nodes do not split it)
    ("parallel_layout", "model_load_capacity", 3.5,
     r"Invalid data-parallel launch options: `--nnodes \d+` must evenly divide the total world size"
     r"|World size \(\d+\) is larger than the number of available GPUs"
     r"|number of required \w+ exceeds the total number of available"
     r"|Not enough total available nodes|Not enough resources to allocate \d+ DP ranks"
     r"|must be a multiple of number of devices per node|decode-context-parallel-size\S* \(\d+\) exceeds the maximum",
     "vLLM: parallel layout needs more GPUs than there are"),
    # vLLM on Ray before the v1 engine (vllm/executor/ray_gpu_executor.py, later ray_distributed_executor.py,
    # _init_workers_ray: ValueError "Ray does not allocate any GPUs on the driver node. Consider
    # adjusting the Ray placement group or running the driver on a GPU node."): the placement
    # group left the driver's node without a GPU, the layout against the GPUs there are, 3.5.
    ("parallel_layout", "model_load_capacity", 3.5, r"Ray does not allocate any GPUs on the driver node",
     "vLLM on Ray: no GPU of the placement group on the driver's node"),
    # CUDA error 101 (driver_types.h cudaErrorInvalidDevice, cudaGetErrorString "invalid device
    # ordinal"; driver API CUDA_ERROR_INVALID_DEVICE): a rank asked for a GPU index the process does
    # not have, mostly a parallel size larger than the GPUs there are. 2.5: a container given fewer
    # GPUs than the launch expects prints it too.
    ("parallel_layout", "model_load_capacity", 2.5,
     r"invalid device ordinal|cudaErrorInvalidDevice\b|CUDA_ERROR_INVALID_DEVICE\b",
     "a rank asked for a GPU index that is not there"),
    # vLLM 0.33's other layout checks:
    #   v1/executor/multiproc_executor.py, ray_executor_v2.py  "world_size (N) must be equal to the
    #       tensor_parallel_size (T) x pipeline_parallel_size (P) x prefill_context_parallel_size"
    #   v1/executor/ray_utils.py   "Cannot provide a placement group requiring N GPUs ... Tensor
    #       parallel size may exceed available GPUs in your cluster"
    #   config/model.py            "Pipeline parallelism is not supported for this model", "Number of
    #       experts in the model must be greater than 0 when expert parallelism is enabled",
    #       "Decode context parallelism for GQA/MQA requires `--tensor-parallel-size` (N) to be
    #       greater than the model's total number of KV heads"
    #   config/parallel.py         "data_parallel_size_local (N) must be <= data_parallel_size"
    #   engine/arg_utils.py        every "Invalid data-parallel launch options: ..." (nnodes,
    #       node-rank, backend, local size)
    #   v1/engine/utils.py         "World size N is smaller than the maximum number of devices per node"
    #   model_executor/model_loader/weight_cache/daemon.py "--nnodes (N) must evenly divide"
    #   model_executor/layers/quantization/auto_awq.py, fp_quant.py, quark/schemes/quark_w4a16_int4.py
    #       "The input size is not aligned with the quantized weight shape" (and "output size"):
    #       the tensor-parallel split cuts a quantization group
    ("parallel_layout", "model_load_capacity", 3.5,
     r"must be equal to the tensor_parallel_size|Tensor parallel size may exceed available GPUs"
     r"|Pipeline parallelism is not supported for this model"
     r"|Number of experts in the model must be greater than 0 when expert parallelism"
     r"|Decode context parallelism for GQA/MQA requires|data_parallel_size_local \(\d+\) must be <="
     r"|Invalid data-parallel launch options|is smaller than the maximum number of devices per node"
     r"|must evenly divide|(input|output) size is not aligned with the quantized weight shape",
     "vLLM: the parallel layout does not fit the model or the GPUs"),
    # "unexpected key" as a word only: Python's TypeError "got an unexpected keyword argument" (a
    # library version mismatch, not a checkpoint) and Apptainer's "unexpected keyservers list" are not
    # state-dict keys (PyTorch torch/nn/modules/module.py: "Unexpected key(s) in state_dict").
    ("weights", "model_load_capacity", 3.5,
     r"SafetensorError|Error while deserializing header|Cannot load weights|size mismatch for|shape mismatch"
     r"|KeyError: '[\w.]*(weight|bias|scale|experts|proj|embed|qweight|scales|zeros)[\w.]*'"
     r"|Unexpected key\(s\) in state_dict|unexpected key\b|Missing key\(s\) in state_dict|weight_loader"
     r"|does not appear to have a file named"
     r"|No such file or directory: .*\.(safetensors|bin|pt)|incomplete metadata|HeaderTooLarge",
     "weights do not match the loader"),
    # A checkpoint tensor the model has no parameter for: vLLM's load_weights looks each name up
    # (model_executor/models/llama.py and the other models: "param = params_dict[name]"), and the
    # engine logs the KeyError by its text alone, which Python makes the quoted key
    # ("ERROR ... engine.py:366] 'layers.17.mlp.down_proj.weight.absmax'"). The line's whole
    # message is a dotted parameter name (a quantized checkpoint's extra tensors: bitsandbytes'
    # absmax and quant_map, a scale): 3, as the weights family's loader errors.
    ("weights", "model_load_capacity", 3.0,
     r"(^|\] )'[\w.]+\.(weight|bias|qweight|scales|qzeros|\w*_scale)(\.\w+)?'$",
     "a checkpoint tensor the model has no parameter for (KeyError)"),
    # vLLM 0.33 model_executor/model_loader: default_loader.py "Cannot find any model weights with",
    # "Following weights were not initialized from checkpoint"; runai_streamer_loader.py "Cannot find
    # any safetensors model weights"; sharded_state_loader.py "Could not find checkpoint files",
    # "Missing keys (...) in loaded state"; tensorizer.py "The serialized model contains tensors on
    # the meta device"; weight_utils.py "Cannot find the config file for <quantization>".
    ("weights", "model_load_capacity", 3.5,
     r"Cannot find any (safetensors )?model weights with|Following weights were not initialized from checkpoint"
     r"|Could not find checkpoint files|Missing keys .* in loaded state|serialized model contains tensors on the meta"
     r"|Cannot find the config file for", "vLLM loader: the checkpoint does not hold the model's weights"),
    # More of vLLM 0.33's checkpoint checks: model_loader/weight_utils.py "Weight files referenced in
    # index but missing", "Attempted to load weight (shape) into parameter (shape)"; runai_streamer_
    # loader.py "Empty or invalid weight map", "Invalid checkpoint index entry", "Incomplete
    # checkpoint headers"; model_loader/__init__.py "Load format `X` is not supported".
    ("weights", "model_load_capacity", 3.5,
     r"Weight files referenced in index but missing|Attempted to load weight \(.*\) into parameter"
     r"|Empty or invalid weight map|Invalid checkpoint index entry|Incomplete checkpoint headers"
     r"|Load format `[^`]*` is not supported", "vLLM loader: checkpoint files or shapes do not match"),
    # vLLM's weight loader meeting a checkpoint tensor the model has no place for
    # (model_executor/models/utils.py AutoWeightsLoader: "There is no module or parameter named
    # '{prefix}' in {module}"): checkpoint and model disagree, as a KeyError on a weight, 3.5.
    ("weights", "model_load_capacity", 3.5, r"There is no module or parameter named",
     "vLLM loader: a checkpoint tensor the model has no parameter for"),
    ("quantization", "model_load_capacity", 3.5,
     r"quantization .*(is )?not supported"
     r"|not supported (for|on) (the )?(current )?(GPU|device|hardware|compute capability)"
     r"|Unknown quantization method|minimum capability|requires (a )?(GPU|device) with compute capability"
     r"|fp8 .*not supported|Marlin.*(not supported|require)|compute capability .* (is )?(below|lower|less)",
     "quantization scheme the kernel or GPU does not support"),
    # vLLM's dtype check against the GPU (vllm/worker/worker.py _check_if_gpu_supports_dtype:
    # "Bfloat16 is only supported on GPUs with compute capability of at least 8.0"; vLLM 0.2's
    # RuntimeError "GPUs with compute capability below 7.0 are not supported."): the model's dtype does not run
    # on this GPU, a model-load problem like the quantization minimum above.
    # Number formats the GPU has no hardware for: Triton's frontend refusing an FP8 type the target
    # lacks (triton python/triton/language/core.py dtype.to_ir: ValueError(f'type {self} not supported
    # in this architecture. The supported fp8 dtypes are {...}'), fp8e4nv below SM89; its casts in
    # python/triton/language/semantic.py: assert builder.options.allow_fp8e4nv, "fp8e4nv data type is
    # not supported on CUDA arch < 89") and nunchaku's
    # FP4 GEMM built without FP4 for this GPU (nunchaku src/kernels/zgemm/gemm_w4a4.cuh trap_no_fp4:
    # printf "FP4 is not available on this device", below SM120): FP8/FP4 weights on a GPU without
    # those types, as the FP8 minimum capability, 3.5.
    ("quantization", "model_load_capacity", 3.5,
     r"type fp8\w* not supported in this architecture|FP4 is not available on this device"
     r"|fp8e4nv data type is not supported on CUDA arch",
     "FP8/FP4 weights on a GPU without those types"),
    ("quantization", "model_load_capacity", 3.5,
     r"Bfloat16 is only supported on GPUs with compute capability|GPUs with compute capability below \S+ are not supported",
     "model dtype not supported by this GPU"),
    # SGLang's own floor on the GPU (sgl-project/sglang python/sglang/srt/model_executor/model_runner.py,
    # where the capability is below 8.0 and its minor below 5: RuntimeError "SGLang only supports sm75
    # and above."): a Volta or older GPU that its kernels do not run on, as vLLM's capability floor, 3.5.
    ("quantization", "model_load_capacity", 3.5, r"SGLang only supports sm ?\d+ and above",
     "SGLang: the GPU is below the compute capability it supports"),
    # vLLM 0.33 config/model.py: "The model type X does not support float16. Reason: ..." (the
    # model's dtype, forced by the GPU or the flag, does not run it)
    ("quantization", "model_load_capacity", 3.0, r"does not support float16\. Reason",
     "vLLM: the model does not run in this dtype"),
    # Kernels the GPU generation cannot run: flash-attention's own check (csrc/flash_attn/
    # flash_api.cpp TORCH_CHECK "FlashAttention only supports Ampere GPUs or newer.") and TGI's
    # refusal to shard a model without it (text_generation_server/models/__init__.py
    # FLASH_ATT_ERROR_MESSAGE "{} requires Flash Attention enabled models."). The model does not
    # load on this GPU, like a quantization minimum: 3.5.
    ("quantization", "model_load_capacity", 3.5,
     r"FlashAttention only supports Ampere GPUs or newer|requires Flash Attention enabled models",
     "attention kernels need a newer GPU"),
    # CUDA error 209 (cudaErrorNoKernelImageForDevice, CUDA_ERROR_NO_BINARY_FOR_GPU; cudaGetErrorString
    # "no kernel image is available for execution on the device"): the build carries no kernels for
    # this GPU's architecture (a wheel or llama.cpp build without its sm_XX). CUDA itself works; the
    # model's kernels do not run on this GPU, like the flash-attention check above: 3.5.
    ("quantization", "model_load_capacity", 3.5,
     r"no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice"
     r"|CUDA_ERROR_NO_BINARY_FOR_GPU", "the build has no kernels for this GPU's architecture"),
    ("host_memory", "model_load_capacity", 3.0,
     r"oom-kill|Out of memory: Killed process|OOMKilled|Cannot allocate memory|std::bad_alloc", "host memory OOM"),
    # vLLM 0.33 distributed/device_communicators/shm_broadcast.py: "Insufficient space in /dev/shm
    # for <buffer>: N MiB required" (the container's --shm-size or --ipc=host)
    ("host_memory", "model_load_capacity", 3.0,
     r"Insufficient space in \S*shm\S* for", "vLLM: shared memory too small for its buffers"),
    ("model_len", "model_load_capacity", 2.5,
     r"max_model_len.*(greater|larger|exceeds)|(greater|larger) than the (derived|maximum) max_model_len"
     r"|User-specified max_model_len", "context length above what fits"),

    # Out of memory in other frameworks' words:
    #   TensorFlow tensorflow/core/framework/op_kernel.cc / common_runtime: ResourceExhaustedError
    #     "OOM when allocating tensor with shape[...]" (4, as CUDA OOM)
    #   cuBLAS/cuDNN/cuSOLVER status names (cublas_api.h CUBLAS_STATUS_ALLOC_FAILED, cudnn.h
    #     CUDNN_STATUS_ALLOC_FAILED, cusolver_common.h CUSOLVER_STATUS_ALLOC_FAILED), which PyTorch
    #     prints as "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    #     (aten/src/ATen/cuda/CublasHandlePool.cpp): the library could not get its workspace, 3.5
    #   SGLang python/sglang/srt/model_executor/model_runner.py: "Not enough memory. Please try to
    #     increase --mem-fraction-static." (the KV pool got no tokens, 4) and "The memory capacity
    #     is unbalanced. Some GPUs may be occupied by other processes." (3, as vLLM's free memory check)
    ("gpu_memory", "model_load_capacity", 4.0, r"OOM when allocating tensor", "TensorFlow: out of GPU memory"),
    ("gpu_memory", "model_load_capacity", 3.5, r"(CUBLAS|CUDNN|CUSOLVER)_STATUS_ALLOC_FAILED",
     "cuBLAS/cuDNN: no GPU memory for the library's workspace"),
    ("kv_cache", "model_load_capacity", 4.0, r"Not enough memory\. Please try to increase --mem-fraction-static",
     "SGLang: no memory left for the KV cache pool"),
    ("gpu_memory", "model_load_capacity", 3.0,
     r"The memory capacity is unbalanced\. Some GPUs may be occupied by other processes",
     "SGLang: another process holds memory on some GPUs"),
    # Out of GPU memory in more stacks' own words (the raise site beside each):
    #   CTranslate2 (faster-whisper, WhisperX) src/cuda/utils.h CUDA_CHECK: THROW_RUNTIME_ERROR("CUDA
    #     failed with error " + cudaGetErrorString(status)), cudaErrorMemoryAllocation's string being
    #     "out of memory": CUDA OOM, 4. Its other errors (the driver's age) are not matched.
    #   PyTorch c10/cuda/CUDAMallocAsyncAllocator.cpp mallocAsync: OutOfMemoryError "Allocation on
    #     device <d> would exceed allowed memory. (out of memory)", the cudaMallocAsync backend that
    #     ComfyUI turns on by default (Comfy-Org/ComfyUI cuda_malloc.py "backend:cudaMallocAsync";
    #     execution.py logs "!!! Exception during processing !!! {ex}"). The device is a
    #     c10::DeviceIndex, an int8_t that the stream writes as a character: device 0 is a NUL, and
    #     the Python message ends there, as "Allocation on device " with nothing after it. The whole
    #     text, or the cut one after the exception's name or ComfyUI's prefix, 4; the words elsewhere
    #     (a comment's "allocation on device (cudaMalloc)") are not taken.
    #   PaddlePaddle paddle/fluid/memory/allocation/cuda_allocator.cc (and
    #     cuda_virtual_mem_allocator.cc): ResourceExhausted "Out of memory error on GPU %d. Cannot
    #     allocate %s memory on GPU %d" ("on GPU Virtual Memory %d"), 4.
    #   MXNet src/storage/pooled_storage_manager.h: LOG(FATAL) "cudaMalloc retry failed: " +
    #     cudaGetErrorString (after releasing its pool and retrying), 4 as its "cudaMalloc failed".
    #   ONNX Runtime onnxruntime/core/framework/bfc_arena.cc BFCArena::AllocateRawInternal: "Failed to
    #     allocate memory for requested buffer of size %zu" (the CUDA arena, or the CPU one: the
    #     model's memory either way), 3.5.
    #   ggml (llama.cpp, whisper.cpp) ggml/src/ggml-alloc.c ggml_gallocr_reserve_n: "%s: failed to
    #     allocate %s buffer of size %zu" with a CUDA buffer type ("CUDA0"): the compute buffer does
    #     not fit in GPU memory, 4 as "unable to allocate CUDA0 buffer". CUDA_Host is not matched.
    #   ExLlamaV2 exllamav2/model.py load_autosplit_gen: RuntimeError "Insufficient VRAM for model
    #     and cache" (no GPU left to put the next layer on), 4.
    #   Whisperer (tigros/Whisperer whisperer/Form1.cs): "Insufficient graphics memory for this
    #     model!", its check of the GPU's memory against the chosen Whisper model before it runs, 3.5.
    ("gpu_memory", "model_load_capacity", 4.0, r"CUDA failed with error out of memory",
     "CTranslate2: out of GPU memory"),
    ("gpu_memory", "model_load_capacity", 4.0,
     r"Allocation on device \d* ?would exceed allowed memory"
     r"|(OutOfMemoryError: |!!! Exception during processing !!! )Allocation on device\s*$",
     "PyTorch cudaMallocAsync (ComfyUI): out of GPU memory"),
    ("gpu_memory", "model_load_capacity", 4.0, r"Out of memory error on GPU (Virtual Memory )?\d+",
     "PaddlePaddle: out of GPU memory"),
    ("gpu_memory", "model_load_capacity", 4.0, r"cudaMalloc retry failed: out of memory", "MXNet: out of GPU memory"),
    ("gpu_memory", "model_load_capacity", 3.5, r"Failed to allocate memory for requested buffer of size \d+",
     "ONNX Runtime: its memory arena could not grow"),
    # The same arena at its limit (gpu_mem_limit, or what the device gives) before it asks CUDA
    # (microsoft/onnxruntime onnxruntime/core/framework/bfc_arena.cc BFCArena::Extend: "Available memory of %zu is smaller
    # than requested bytes of %zu"; AllocateRawInternal's LOGS ERROR "BFC Arena ran out of memory
    # trying to allocate %zu"), 3.5 as its failed extension; and the CUDA execution provider's own
    # check of a CUDA call (onnxruntime/core/providers/cuda/cuda_call.cc CudaCall: "%s failure %d: %s ;
    # GPU=%d ; hostname=%s ; file=%s ; line=%d ; expr=%s; %s") answering cudaErrorMemoryAllocation,
    # "CUDA failure 2: out of memory ; GPU=0", 4 as CUDA OOM. Its other codes are not memory, and its
    # ROCm twin's "HIP failure" is another accelerator's.
    ("gpu_memory", "model_load_capacity", 3.5,
     r"Available memory of \d+ is smaller than requested bytes of \d+|BFC Arena ran out of memory trying to allocate \d+",
     "ONNX Runtime: its memory arena is at its limit"),
    ("gpu_memory", "model_load_capacity", 4.0, r"\bCUDA failure 2: out of memory ; GPU=\d+",
     "ONNX Runtime CUDA provider: out of GPU memory"),
    ("gpu_memory", "model_load_capacity", 4.0, r"failed to allocate CUDA\d+ buffer of size \d+",
     "ggml: the compute buffer does not fit in GPU memory"),
    ("gpu_memory", "model_load_capacity", 4.0, r"Insufficient VRAM for model and cache",
     "ExLlamaV2: the model and its cache do not fit in GPU memory"),
    ("gpu_memory", "model_load_capacity", 3.5, r"Insufficient graphics memory for this model",
     "Whisperer: the GPU has too little memory for the model"),
    # text-generation-inference splitting a weight over its shards (huggingface/text-generation-inference
    # server/text_generation_server/utils/weights.py get_sharded: AssertionError "The choosen size
    # {size} is not compatible with sharding on {world_size} shards", "chosen" in the modelling files
    # of later releases): a dimension (the vocabulary, the intermediate size) the number of shards
    # does not divide, the layout against the model as "must be divisible by" above, 3.5.
    ("parallel_layout", "model_load_capacity", 3.5, r"The choo?sen size \d+ is not compatible with sharding on \d+ shards",
     "TGI: a weight's size is not divisible by the number of shards"),
    # Its tensor-parallel layers before that check (text-generation-inference 0.4 to 0.8,
    # server/text_generation_server/utils/layers.py TensorParallelColumnLinear, TensorParallelRowLinear
    # and TensorParallelEmbedding, earlier the custom_modeling/flash_*_modeling.py files, and its BLOOM
    # and GPT-NeoX heads: "assert in_features % self.tp_world_size == 0", out_features, num_embeddings,
    # self.num_heads, self.num_attention_heads), which a traceback prints as the assert's source line:
    # a dimension the number of shards does not divide, the same, 3.5.
    ("parallel_layout", "model_load_capacity", 3.5,
     r"assert (self\.)?(in_features|out_features|num_embeddings|num_heads|num_attention_heads)"
     r" % self\.tp_world_size == 0",
     "TGI: a layer's size is not divisible by the number of shards"),
    # Its shards against the GPUs torch sees (server/text_generation_server/utils/dist.py
    # initialize_torch_distributed: "assert world_size <= torch.cuda.device_count(), \"Each process is
    # one gpu\"", asserted only where torch.cuda.is_available(), so some GPU is seen): more shards than
    # GPUs, the layout against the GPUs there are as vLLM's "World size (N) is larger than the number of
    # available GPUs" below; 3, a container given fewer GPUs than the launch asks for prints it too.
    ("parallel_layout", "model_load_capacity", 3.0, r"Each process is one gpu",
     "TGI: more shards than GPUs visible"),
    # Its loader asking the checkpoint for a tensor the model needs (huggingface/text-generation-inference
    # server/text_generation_server/utils/weights.py Weights.get_filename: RuntimeError(f"weight {tensor_name}
    # does not exist")): the files do not hold it (an unquantized checkpoint loaded with --quantize, where the
    # name ends in qweight or scales, or tied or renamed weights), checkpoint and model disagree, 3 (a launch
    # flag can be the cause). A dotted tensor name is required: "weight file does not exist" is not this.
    ("weights", "model_load_capacity", 3.0, r"\bweight \w+(\.\w+)+ does not exist",
     "TGI: the checkpoint lacks a tensor the model needs"),
    # candle-vllm's paged attention (src/paged_attention/mod.rs PagedAttention::new, line 34:
    # "let num_queries_per_kv = num_attention_heads / num_key_value_heads;") with the KV heads split
    # over the GPUs given: more GPUs than the model has KV heads leaves each none, and Rust panics
    # "attempt to divide by zero" there. The model's heads do not divide over the devices, as TGI's
    # sharding assertion, 3.5; the panic's text is read with the file, in both of Rust's panic
    # formats, since a division by zero elsewhere says nothing of the layout. Rust since 1.73 puts
    # the message on the line after "panicked at <file>:<line>:<col>:", so the panic at that file's
    # line 34, the division's line in every version of the file, is read alone, 3.
    ("parallel_layout", "model_load_capacity", 3.5,
     r"panicked at src/paged_attention/mod\.rs:\d+:\d+:?\s*attempt to divide by zero"
     r"|panicked at 'attempt to divide by zero', src/paged_attention/mod\.rs",
     "candle-vllm: more GPUs than the model's KV heads (no KV head per rank)"),
    ("parallel_layout", "model_load_capacity", 3.0, r"panicked at src/paged_attention/mod\.rs:34:\d+",
     "candle-vllm: a panic at the KV-head division (more GPUs than KV heads)"),
    # Host memory in the schedulers' and servers' words:
    #   Ollama llm/server.go: "model requires more system memory (X) than is available (Y)" (4)
    #   Ray python/ray/exceptions.py OutOfMemoryError (memory monitor): "Task was killed due to the
    #     node running low on memory" (2.55+: "N worker(s) were killed due to ...")
    #   Slurm task/cgroup plugin: "Detected N oom_kill event(s) in StepId=... Some of the step tasks
    #     have been OOM Killed." (older: "oom-kill event(s) ... killed by the cgroup out-of-memory
    #     handler")
    #   kubelet pkg/kubelet/eviction/helpers.go: "The node was low on resource: memory."
    ("host_memory", "model_load_capacity", 4.0, r"model requires more system memory \(.*\) than is available",
     "Ollama: the model does not fit in host memory"),
    ("host_memory", "model_load_capacity", 3.0,
     r"killed due to the node running low on memory|Detected \d+ oom[_-]kill events?"
     r"|Some of the step tasks have been OOM Killed|killed by the cgroup out-of-memory handler"
     r"|The node was low on resource: memory", "host memory exhausted (Ray, Slurm, kubelet)"),
    # Checkpoints that do not load, in the loaders' own words:
    #   PyTorch torch/nn/modules/module.py load_state_dict "Error(s) in loading state_dict for <Module>"
    #   PyTorch caffe2/serialize/inline_container.cc "PytorchStreamReader failed reading zip archive:
    #     failed finding central directory" (a truncated or corrupt .pt/.bin file)
    #   PyTorch torch/serialization.py "Weights only load failed" (2.6's weights_only default meets
    #     a checkpoint that pickles objects: 3)
    #   llama.cpp src/llama-model-loader.cpp "tensor '%s' data is not within the file bounds, model is
    #     corrupted or incomplete", "wrong number of tensors; expected %d, got %d"; ggml/src/gguf.cpp
    #     "invalid magic characters" (not a GGUF file)
    ("weights", "model_load_capacity", 3.5,
     r"Error\(s\) in loading state_dict for|PytorchStreamReader failed reading (zip archive|file)"
     r"|data is not within the file bounds, model is corrupted or incomplete|wrong number of tensors; expected \d+"
     r"|gguf_init_from_file\w*: invalid magic characters", "the checkpoint file does not load"),
    ("weights", "model_load_capacity", 3.0, r"Weights only load failed",
     "PyTorch: the checkpoint needs a full unpickle (weights_only)"),
    # transformers' reading of a checkpoint file that torch.load refused (huggingface/transformers
    # src/transformers/modeling_utils.py load_state_dict: OSError "You seem to have cloned a repository
    # without having git-lfs installed. Please install git-lfs and run `git lfs install` followed by
    # `git lfs pull` in the folder you cloned." where the file is a Git LFS pointer, else OSError
    # "Unable to load weights from pytorch checkpoint file for '%s' at '%s'. If you tried to load a
    # PyTorch model from a TF 2.0 checkpoint, please set from_tf=True.", "checkpoint file" without
    # "pytorch" in later releases and in diffusers' copy): the weights on disk are not a checkpoint
    # (a pointer, a cut download), as PyTorch's "failed reading zip archive", 3.5.
    ("weights", "model_load_capacity", 3.5,
     r"cloned a repository without having git-lfs installed|Unable to load weights from (pytorch )?checkpoint file for",
     "transformers: the checkpoint file does not load (a Git LFS pointer, a broken file)"),
    # Kernels that do not exist for this GPU's architecture (as error 209 above):
    #   PyTorch torch/cuda/__init__.py _check_capability: "<GPU> with CUDA capability sm_XX is not
    #     compatible with the current PyTorch installation", "PyTorch no longer supports this GPU
    #     because it is too old"
    #   ptxas (Triton's bundled one, XLA's, nvcc's) older than the GPU: "ptxas fatal   : Value 'sm_XX'
    #     is not defined for option 'gpu-name'" (xla/stream_executor/cuda/ptx_compiler_impl.cc
    #     names the case)
    #   Ollama discover/gpu.go: "CUDA GPU is too old. Compute Capability detected: X.Y" (INFO)
    #   CUDA error 98 (cudaErrorInvalidDeviceFunction, "invalid device function"): a kernel with no
    #     image for this GPU, mostly a build without its architecture; 2.5, a launch bug prints it too
    ("quantization", "model_load_capacity", 3.0,
     r"with CUDA capability sm_\d+ is not compatible with the current PyTorch installation"
     r"|PyTorch no longer supports this GPU because it is too old"
     r"|ptxas fatal\s*: Value 'sm_\w+' is not defined for option 'gpu-name'"
     r"|CUDA GPU is too old\.( Falling back to CPU mode\.)? Compute Capability detected",
     "the build has no kernels for this GPU's architecture"),
    # More toolchains older than the GPU, or kernels needing a newer GPU than the one there:
    #   LLVM's NVPTX backend (llvm/lib/Target/NVPTX/NVPTXSubtarget.cpp, report_fatal_error "PTX
    #     version X does not support target 'sm_XX'. Minimum required PTX version is Y."), as JAX/XLA
    #     and Triton print it: the compiler's PTX ISA older than the GPU, as ptxas's 'gpu-name' above, 3
    #   ptxas refusing an instruction the target lacks ("Feature '.m16n8k16' requires .target sm_80
    #     or higher"): a kernel (AWQ, BF16 MMA) that needs a newer GPU than the one built for, 3
    #   TensorRT-LLM's weight-only groupwise GEMM finding no kernel that runs (cpp/tensorrt_llm/plugins/
    #     weightOnlyGroupwiseQuantMatmulPlugin: TLLM_CHECK_WITH_INFO "No valid weight only groupwise
    #     GEMM tactic(It is usually caused by the failure to execute all candidate configurations of
    #     the CUTLASS kernel..."): AWQ/GPTQ kernels absent for this GPU (pre-Ampere), 3
    #   XLA's ptxas older than the GPU (xla/stream_executor/cuda/subprocess_compilation.cc, formerly
    #     gpu/asm_compiler.cc: LOG(WARNING) "Falling back to the CUDA driver for PTX compilation;
    #     ptxas does not support CC X.Y", redzone_allocator's "ptxas ... too old. Falling back to the
    #     driver to compile."): a warning, the driver may still compile it, 2.5
    ("quantization", "model_load_capacity", 3.0,
     r"PTX version \d+\.\d+ does not support target 'sm_\w+'"
     r"|error\s*: Feature '[.\w]+' requires \.target sm_\d+ or higher"
     r"|No valid weight only groupwise GEMM tactic",
     "the toolchain or kernel needs another GPU architecture than this one"),
    ("quantization", "model_load_capacity", 2.5,
     r"Falling back to the CUDA driver for PTX compilation; ptxas does not support CC \d+\.\d+",
     "XLA: its ptxas is older than this GPU"),
    # TensorRT-LLM's kernels refusing this GPU's architecture (cpp/include/tensorrt_llm/common/assert.h
    # TLLM_CHECK_WITH_INFO, thrown as "[TensorRT-LLM][ERROR] Assertion failed: %s (%s:%d)" by
    # common/tllmException.cpp; "Unsupported architecture" in kernels/contextFusedMultiHeadAttention/
    # fmhaRunner.cpp for an SM without fused attention kernels, "Unsupported Arch" in
    # kernels/cutlass_kernels/cutlass_preprocessors.cpp for weight-only GEMMs below the SMs it has
    # kernels for): the engine's kernels do not reach this GPU, as the groupwise GEMM tactic above, 3.
    # The assertion's own file (under tensorrt_llm/) or TensorRT-LLM's tag is required: "Unsupported
    # architecture" alone is any installer's uname check.
    ("quantization", "model_load_capacity", 3.0,
     r"\[TensorRT-LLM\]\[ERROR\] Assertion failed: Unsupported arch"
     r"|Assertion failed: Unsupported arch(itecture)? \(\S*tensorrt_llm/",
     "TensorRT-LLM: its kernels do not support this GPU's architecture"),
    ("quantization", "model_load_capacity", 2.5, r"invalid device function|cudaErrorInvalidDeviceFunction",
     "CUDA error 98: a kernel without an image for this GPU"),

    # Triton's compiler finding a kernel larger than this GPU allows (triton python/triton/runtime/
    # errors.py OutOfResources: "out of resource: shared memory, Required: N, Hardware limit: M.
    # Reducing block sizes or `num_stages` may help."): the model's kernels do not fit this GPU, as a
    # compute-capability minimum, 3.
    ("quantization", "model_load_capacity", 3.0, r"out of resource: \w+( \w+)?, Required: \d+, Hardware limit: \d+",
     "Triton: the kernel needs more than this GPU has (shared memory, registers)"),

    # Memory at load in the serving and loading libraries' own words:
    #   TGI server/text_generation_server/models/flash_causal_lm.py warmup: "Not enough memory to
    #     handle N prefill tokens. You need to decrease `--max-batch-prefill-tokens`" (PyTorch's OOM
    #     re-raised, 4)
    #   llama.cpp src/llama-kv-cache.cpp: "failed to allocate buffer for kv cache" (4)
    #   transformers src/transformers/quantizers/quantizer_bnb_4bit.py: "Some modules are dispatched
    #     on the CPU or the disk. Make sure you have enough GPU RAM to fit the quantized model." (the
    #     device map put layers off the GPU, 3.5)
    ("gpu_memory", "model_load_capacity", 4.0, r"Not enough memory to handle \d+ prefill tokens",
     "TGI: the warmup batch does not fit in GPU memory"),
    # text-generation-inference's warmup failing for any reason, the model loaded: the server's gRPC
    # interceptor (huggingface/text-generation-inference server/text_generation_server/interceptor.py:
    # logger.exception(f"Method {method_name} encountered an error.") with method Warmup) and the router that
    # asked for it (backends/v3/src/lib.rs V3Error::Warmup, earlier router/src/main.rs and server.rs: "Unable
    # to warmup the Python model shards: {0}", and main's exit "Error: Warmup(...)", "Error:
    # WebServer(Warmup(...))" or "Error: Backend(Warmup(...))" as the releases nest it). The first batch after
    # the load does not run: mostly memory (its OOM is re-raised as "Not enough memory to handle N prefill
    # tokens"), also a kernel this GPU lacks; the cause is on the lines after it, so a symptom, 2, in the
    # memory family. Its other methods (Prefill, Decode) fail while serving and are not taken. The router's
    # check after warmup that the KV cache holds one request of --max-total-tokens (V3Error::NotEnoughMemory,
    # "Not enough memory to handle `max_total_tokens={0}`", main's exit "Error: Backend(NotEnoughMemory(N))"
    # or, before the backends, "Error: WebServer(NotEnoughMemory(N))"): the cache does not fit, 4.
    ("gpu_memory", "model_load_capacity", 2.0,
     r"Method Warmup encountered an error|Unable to warmup the Python model shards"
     r"|Error: ((Backend|WebServer)\()?Warmup\(",
     "TGI: the model's warmup batch failed (mostly GPU memory)"),
    ("kv_cache", "model_load_capacity", 4.0,
     r"Not enough memory to handle `max_total_tokens=\d+`|Error: ((Backend|WebServer)\()?NotEnoughMemory\(\d+\)",
     "TGI: the KV cache left after warmup does not hold one request of max_total_tokens"),
    ("kv_cache", "model_load_capacity", 4.0, r"failed to allocate buffer for kv cache",
     "llama.cpp: the KV cache does not fit"),
    ("gpu_memory", "model_load_capacity", 3.5, r"Some modules are dispatched on the CPU or the disk",
     "transformers: the quantized model does not fit in GPU memory"),

    # transformers' loader with a device map that put weights on disk and nowhere to write them
    # (src/transformers/modeling_utils.py: "The current `device_map` had weights offloaded to the
    # disk. Please provide an `offload_folder` for them."): the model fits neither the GPUs nor host
    # memory, 3.
    ("gpu_memory", "model_load_capacity", 3.0, r"The current `device_map` had weights offloaded to the disk",
     "transformers: the model does not fit in GPU and host memory"),
    # Optimum's GPTQ integration, under transformers' GPTQ loading, refusing the ExLlama kernels for a
    # model whose device map left modules on the CPU or disk (huggingface/optimum optimum/gptq/
    # quantizer.py post_init_model: ValueError "Found modules on cpu/disk. Using Exllama or Exllamav2
    # backend requires all the modules to be on GPU.You can deactivate exllama backend by setting
    # ..."; "Using Exllama backend requires" before ExLlamaV2): the quantized model does not fit the
    # GPUs, as bitsandbytes' "Some modules are dispatched on the CPU or the disk", 3 (a model on the
    # CPU alone, no GPU seen, prints it too). Its warning while quantizing ("... Setting
    # `disable_exllama=True`") goes on without ExLlama and is not taken.
    ("gpu_memory", "model_load_capacity", 3.0,
     r"Found modules on cpu/disk\. Using Exllama (or Exllamav2 )?backend requires all the modules to be on GPU\.(?! Setting)",
     "Optimum GPTQ: modules offloaded to CPU/disk (the quantized model does not fit the GPUs)"),
    # accelerate's check of a device map before it places the weights (src/accelerate/utils/modeling.py
    # check_device_map, run by dispatch_model and transformers' from_pretrained: ValueError "The
    # device_map provided does not give any device for the following parameters: ..."): the placement
    # of the weights over the GPUs leaves some out (a hand-written or inferred map that misses a
    # module or a tied parameter), the load's layout, 3.
    ("parallel_layout", "model_load_capacity", 3.0, r"The device_map provided does not give any device for the following",
     "accelerate: the device map leaves parameters without a device"),

    # NCCL's own device allocations failing (src/include/alloc.h: "Failed to CUDA calloc %ld bytes",
    # "Failed to CUDA malloc", "Failed to CUDA host alloc"): no GPU memory left for the
    # communicator's buffers, a memory problem as NCCL's "Cuda failure 'out of memory'", 3.
    # Its own family: NCCL's allocator names the rank that ran out, whose peers then report the
    # closed socket ("Connection closed by remote peer", below) and torch's "NCCL error"; those are
    # the echo (docs/domain.md, the NCCL calloc precedent), so this line counts beside the CUDA
    # "out of memory" text rather than inside one family with it.
    ("nccl_alloc", "model_load_capacity", 3.0, r"Failed to CUDA (calloc|malloc|host alloc)( async)? \d+ bytes",
     "NCCL: no GPU memory left for the communicator's buffers"),

    # Ollama's runner dying under a request (ollama 0.1 llm/llama.go, later llm/server.go: on the
    # runner's stream ending in "unexpected EOF", "llama runner exited, you may not have enough
    # available memory to run this model"): Ollama's own reading is memory, but the runner's crash
    # is the symptom, not the proof, 2.
    ("gpu_memory", "model_load_capacity", 2.0,
     r"llama runner exited, you may not have enough available memory to run this model",
     "Ollama: the runner exited, memory most likely"),

    # Ollama's llama-server runner reporting OOM while it loads (ollama llm/llama_server.go:
    # "llama-server reported out-of-memory during startup: %s"), 4.
    ("gpu_memory", "model_load_capacity", 4.0, r"reported out-of-memory during startup",
     "Ollama: the runner ran out of memory loading the model"),

    # The CUDA math libraries' own status names (cufft.h CUFFT_ALLOC_FAILED, cusparse.h
    # CUSPARSE_STATUS_ALLOC_FAILED, curand.h CURAND_STATUS_ALLOCATION_FAILED), as PyTorch and CuPy
    # print them ("cuFFT error: CUFFT_ALLOC_FAILED"): no GPU memory for the library's plan or
    # workspace, as cuBLAS's and cuDNN's ALLOC_FAILED above, 3.5.
    ("gpu_memory", "model_load_capacity", 3.5,
     r"CUFFT_ALLOC_FAILED|CUSPARSE_STATUS_ALLOC_FAILED|CURAND_STATUS_ALLOCATION_FAILED",
     "cuFFT/cuSPARSE/cuRAND: no GPU memory for the library's workspace"),
    # cuBLAS failing to create its handle (PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp: "CUDA error:
    # CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`"): cublasCreate allocates its
    # workspace on the GPU and mostly fails because none is left; an earlier device-side error also
    # leaves it unable to, so a symptom, 2.
    ("gpu_memory", "model_load_capacity", 2.0, r"CUBLAS_STATUS_NOT_INITIALIZED when calling `?cublasCreate",
     "cuBLAS: no handle (mostly no GPU memory left for its workspace)"),
    # The libraries having no kernel for this GPU's architecture (cublas_api.h
    # CUBLAS_STATUS_ARCH_MISMATCH "the function requires a feature absent from the device
    # architecture", cudnn.h CUDNN_STATUS_ARCH_MISMATCH: a cuDNN that dropped the GPU's generation),
    # as error 209 above, 3. And CUDA error 701 (driver_types.h cudaErrorLaunchOutOfResources,
    # cudaGetErrorString "too many resources requested for launch"): a kernel asks for more registers
    # or threads than this GPU gives a block, mostly a build for another GPU's limits, 2.5 (a launch
    # bug prints it too), as Triton's OutOfResources.
    ("quantization", "model_load_capacity", 3.0, r"(CUBLAS|CUDNN)_STATUS_ARCH_MISMATCH",
     "cuBLAS/cuDNN: no kernel for this GPU's architecture"),
    ("quantization", "model_load_capacity", 2.5,
     r"too many resources requested for launch|cudaErrorLaunchOutOfResources|CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "CUDA error 701: a kernel needs more than this GPU gives a block"),
    # bitsandbytes' LLM.int8() matmul failing in cuBLASLt (bitsandbytes-foundation/bitsandbytes
    # bitsandbytes/functional.py igemmlt: Exception("cublasLt ran into an error!"), now
    # bitsandbytes/backends/cuda/ops.py: RuntimeError(f"cublasLt ran into an error!\n\t{shapeA=}...")):
    # the int8 kernels need int8 tensor cores (compute capability 7.5, its diagnostics' "Compute
    # capability < 7.5 detected! Only slow 8-bit matmul is supported", a warning that is not taken),
    # and 8-bit loading on an older GPU ends here; an odd shape prints it too (newer releases fall back
    # to fp32 where no algorithm fits, a warning), so 3, as CUBLAS_STATUS_ARCH_MISMATCH.
    # AutoGPTQ refusing its Marlin kernel below Ampere (AutoGPTQ/AutoGPTQ auto_gptq/modeling/_base.py
    # and nn_modules/qlinear/qlinear_marlin.py: ValueError "Can not use Marlin int4*fp16 kernel with a
    # device of compute capability (7, 5), the minimum compute capability is 8.0 for Marlin kernel"):
    # the quantized kernels do not run on this GPU, as vLLM's Marlin minimum, 3.5. Its refusal on ROCm
    # ("with AMD ROCm version of PyTorch") is another accelerator's and is not matched.
    ("quantization", "model_load_capacity", 3.0, r"cublasLt ran into an error",
     "bitsandbytes: the int8 matmul failed in cuBLASLt (mostly a GPU below compute capability 7.5)"),
    ("quantization", "model_load_capacity", 3.5,
     r"Can not use Marlin int4\*fp16 kernel with a device of compute capability",
     "AutoGPTQ: the Marlin kernel needs compute capability 8.0"),

    # TensorRT refusing a serialized engine (the TensorRT Developer Guide's troubleshooting table and
    # the runtime's IRuntime::deserializeCudaEngine error 6: "The engine plan file is generated on an
    # incompatible device, expecting compute X got compute Y, please rebuild.", "The engine plan file
    # is not compatible with this version of TensorRT, expecting library version X got Y, please
    # rebuild."), as TensorRT-LLM and Triton's TensorRT backend print it. An engine built for another
    # GPU is a build without this GPU's kernels, 3.5 as error 209; one built by another TensorRT is
    # the model's file not loading, 3 as the checkpoint checks.
    ("quantization", "model_load_capacity", 3.5,
     r"engine plan file is generated on an incompatible device", "TensorRT: the engine was built for another GPU"),
    ("weights", "model_load_capacity", 3.0,
     r"engine plan file is not compatible with this version of TensorRT",
     "TensorRT: the engine was built by another TensorRT version"),
    # TensorRT-LLM's runtime refusing an engine file ("Failed to deserialize cuda engine") is with its
    # other raise sites below.

    # vLLM on Ray finding no free GPU on the node it runs on (v1/executor/ray_utils.py
    # initialize_ray_cluster, ValueError "Current node has no GPU available. current_node_resource=
    # ..."): the placement group asks for GPUs the node's Ray resources do not hold (another
    # deployment's or a leaked placement group holds them), the layout against the GPUs there are,
    # 3, as "Ray does not allocate any GPUs on the driver node".
    ("parallel_layout", "model_load_capacity", 3.0, r"Current node has no GPU available",
     "vLLM on Ray: no free GPU in the node's Ray resources"),

    # torchrun's agent reporting a worker killed by SIGKILL (torch/distributed/elastic/multiprocessing/
    # api.py: "failed (exitcode: -9) local_rank: %s (pid: %s) of binary", and errors/__init__.py's
    # "Signal 9 (SIGKILL) received by PID"): without a CUDA error, mostly the host's OOM killer while
    # the checkpoint loads, a symptom, 2.5 (an operator's kill -9 prints it too).
    ("host_memory", "model_load_capacity", 2.5,
     r"failed \(exitcode: -9\) local_rank|Signal 9 \(SIGKILL\) received by PID",
     "torchrun: a worker was SIGKILLed (mostly the host's OOM killer)"),

    # The same entrypoint checking the GPU against the image's supported list ("WARNING: Detected
    # NVIDIA <GPU> GPU, which is not yet supported in this version of the container", then "ERROR: No
    # supported GPU(s) detected to run this container"): an image older than the GPU generation, whose
    # builds lack its kernels, as PyTorch's "sm_XX is not compatible", 3 and 2.5.
    ("quantization", "model_load_capacity", 3.0, r"GPU, which is not yet supported in this version of the container",
     "NGC image: older than this GPU generation"),
    ("quantization", "model_load_capacity", 2.5, r"No supported GPU\(s\) detected to run this container",
     "NGC image: no GPU it supports"),

    # llama.cpp's loader checking each tensor against the architecture (src/llama-model-loader.cpp
    # check_tensor_dims: "tensor '%s' has wrong shape; expected %s, got %s"; "missing tensor '%s'"):
    # the GGUF does not hold what the build expects (a vocabulary padded otherwise, a build older than
    # a hybrid model's tensors), 3.5 and 3, as the checkpoint checks.
    ("weights", "model_load_capacity", 3.5, r"tensor '[^']+' has wrong shape; expected",
     "llama.cpp: a tensor's shape differs from the architecture's"),
    ("weights", "model_load_capacity", 3.0, r"error loading model: missing tensor '",
     "llama.cpp: the GGUF lacks a tensor the architecture needs"),

    # Open MPI's launcher (orte/mca/errmgr and prrte help texts, mpirun printing "mpirun noticed that
    # process rank %d with PID %d on node %s exited on signal 9 (Killed)."): a rank SIGKILLed, mostly
    # by the host's OOM killer, as torchrun's exitcode -9, 2. And its mapper refusing more ranks than
    # the hosts offer (orte/mca/rmaps help-orte-rmaps-base.txt: "There are not enough slots available
    # in the system to satisfy the %d slots that were requested by the application"): an
    # nccl-tests or Horovod launch asking for more ranks than the nodes give, the layout, 2.5.
    ("host_memory", "model_load_capacity", 2.0, r"mpirun noticed that process rank \d+ .*exited on signal 9 \(Killed\)",
     "Open MPI: a rank was SIGKILLed (mostly the host's OOM killer)"),
    ("parallel_layout", "model_load_capacity", 2.5, r"There are not enough slots available in the system to satisfy",
     "Open MPI: more ranks than the hosts offer slots"),

    # SGLang's KV pool exhausted while it schedules (python/sglang/srt/mem_cache/common.py and
    # managers/schedule_batch.py: logger.error and RuntimeError "Prefill out of memory. Try to lower
    # your batch size.", older releases "Decode out of memory ..."): the cache the launch sized does
    # not hold the batch, 3 (a serving-time symptom of the memory fractions chosen at load).
    ("kv_cache", "model_load_capacity", 3.0, r"(Prefill|Decode) out of memory\. Try to lower your batch size",
     "SGLang: the KV cache pool cannot hold the batch"),

    # /dev/shm too small for NCCL's shared-memory transport (NVIDIA/nccl src/misc/shmutils.cc WARN
    # "Error: failed to extend %s to %ld bytes" and "Error while creating shared memory segment %s
    # (size %d)", under /dev/shm/nccl-*; include/shm.h "Call to posix_fallocate failed : No space left
    # on device"): a container on Docker's 64 MB default without --shm-size or --ipc=host, the fix
    # vLLM's "Insufficient space in /dev/shm" names, 3.5 over the ncclSystemError that follows.
    # PyTorch's DataLoader workers dying of SIGBUS in the same /dev/shm (torch/utils/data/_utils/
    # signal_handling.py and dataloader.py: "DataLoader worker (pid %d) is killed by signal: Bus error.
    # It is possible that dataloader's workers are out of shared memory", "Unexpected bus error
    # encountered in worker. This might be caused by insufficient shared memory (shm)"), 3.
    ("host_memory", "model_load_capacity", 3.5,
     r"failed to extend /dev/shm/\S+ to \d+ bytes|Error while creating shared memory segment /dev/shm/",
     "NCCL: /dev/shm too small for its shared-memory transport"),
    ("host_memory", "model_load_capacity", 3.0,
     r"Call to posix_fallocate failed : No space left on device|dataloader's workers are out of shared memory"
     r"|might be caused by insufficient shared memory \(shm\)", "/dev/shm too small (NCCL, DataLoader workers)"),

    # LMDeploy (InternLM/lmdeploy), each at its raise site:
    #   src/turbomind/utils/cuda_utils.h check() (releases before the 2025 refactor): runtime_error
    #     "[TM][ERROR] CUDA runtime error: " + cudaGetErrorString + " file:line", TurboMind's allocator
    #     answering cudaErrorMemoryAllocation: "[TM][ERROR] CUDA runtime error: out of memory", CUDA
    #     OOM in TurboMind's words, 4 (the signal is with TensorRT's out-of-memory texts above, beside
    #     FasterTransformer's). Its other codes ("invalid argument") are not memory.
    #   lmdeploy/pytorch/engine/executor/base.py: RuntimeError "No enough gpu memory for kv cache." (two
    #     blocks or fewer fit), AssertionError "No enough gpu memory for state cache. Please reduce
    #     max_batch_size." and RuntimeError "No enough gpu memory for runtime." (no prefill token fits
    #     beside the weights): the memory left after the weights holds neither, 4. Its warning "No enough
    #     memory. Update max_prefill_token_num=N" goes on with a smaller prefill and is not taken.
    #   src/turbomind/models/llama/LlamaBatch.cc: FT_CHECK_WITH_INFO(..., "No enough blocks."), thrown as
    #     "[TM][ERROR] No enough blocks. Assertion fail: file:line" (cuda_utils.h throwRuntimeError)
    #     where all the cache blocks do not hold one sequence: the cache that cache_max_entry_count sized is
    #     too small for the session, found while serving, 3 as SGLang's "Prefill out of memory".
    ("kv_cache", "model_load_capacity", 4.0, r"No enough gpu memory for (kv|state) cache",
     "LMDeploy: the memory left after the weights does not hold the cache"),
    ("gpu_memory", "model_load_capacity", 4.0, r"No enough gpu memory for runtime",
     "LMDeploy: no GPU memory left for the runtime buffers"),
    ("kv_cache", "model_load_capacity", 3.0, r"\[TM\]\[ERROR\] No enough blocks\.",
     "LMDeploy TurboMind: the cache blocks do not hold one sequence"),
    # TensorRT-LLM (NVIDIA/TensorRT-LLM), each at its raise site (TLLM_CHECK_WITH_INFO and TLLM_THROW,
    # "[TensorRT-LLM][ERROR] Assertion failed: %s (%s:%d)" and "[TensorRT-LLM][ERROR] %s (%s:%d)"):
    #   cpp/tensorrt_llm/runtime/tllmRuntime.cpp: "Failed to deserialize cuda engine." (TensorRT refused
    #     the engine file: built by another TensorRT or for another GPU, a plugin it lacks, a cut file;
    #     TensorRT's own reason comes on the line before), the model's file not loading, 3 (a CUDA
    #     context already broken also leaves it null); and "Failed to allocate memory for weights.
    #     Please try reducing --gpu_weights_percent." (the engine's weights do not fit the GPU), 4.
    #   cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp: "maxTokensInPagedKvCache (N) must be large
    #     enough to process at least 1 sequence to completion (i.e. must be larger than beam_width (B)
    #     * tokensPerBlock (T) * maxBlocksPerSeq (M))": the KV cache the free memory gives does not
    #     hold one sequence of the engine's max length, 4; its INFO "Max tokens in paged KV cache" is not.
    #   tensorrt_llm/_torch/pyexecutor/resource_manager.py (the PyTorch backend's KVCacheManager):
    #     assert "Impossible to fit in any sequence in kvCache" (and "Impossibe", the second assert's
    #     spelling): the same verdict, 4.
    ("weights", "model_load_capacity", 3.0, r"Failed to deserialize cuda engine",
     "TensorRT-LLM: TensorRT refused the engine file"),
    ("gpu_memory", "model_load_capacity", 4.0,
     r"Failed to allocate memory for weights\. Please try reducing --gpu_weights_percent",
     "TensorRT-LLM: the engine's weights do not fit in GPU memory"),
    ("kv_cache", "model_load_capacity", 4.0,
     r"maxTokensInPagedKvCache( \(\d+\))? must be large enough to process at least 1 sequence"
     r"|Impossibl?e to fit in any sequence in kvCache",
     "TensorRT-LLM: the KV cache does not hold one sequence"),
    # llama.cpp reserving its compute graph when the context is created (ggml-org/llama.cpp
    # src/llama-context.cpp: runtime_error "failed to allocate compute pp buffers" / "... tg buffers",
    # logged by llama_init_from_model as "failed to initialize the context: %s"; graph_reserve's own
    # LLAMA_LOG_ERROR "failed to allocate compute buffers", the older llama_new_context_with_model's
    # the same): the compute buffer for the batch does not fit beside the weights and the KV cache,
    # in GPU or host memory, 3 (the cudaMalloc line above it, where there is one, says which).
    ("gpu_memory", "model_load_capacity", 3.0, r"failed to allocate compute (pp |tg )?buffers",
     "llama.cpp: the compute buffer does not fit in memory"),
    # ExLlamaV2 (turboderp/exllamav2), beside its "Insufficient VRAM for model and cache" above:
    #   exllamav2/model.py set_device_map (model.load with a gpu_split): assert "Insufficient space in
    #     device allocation" where the layers left do not fit the GB per GPU the split gives: the model
    #     does not fit the memory it was given, 3 (a split written too small prints it on GPUs that
    #     would hold the model).
    #   exllamav2/config.py prepare: ValueError(f" ## Could not find {prefix}.* in model") where the
    #     checkpoint's files hold no tensor for a layer the architecture expects: checkpoint and
    #     architecture disagree, 3, as llama.cpp's "missing tensor".
    ("gpu_memory", "model_load_capacity", 3.0, r"Insufficient space in device allocation",
     "ExLlamaV2: the layers do not fit the memory the GPU split gives"),
    ("weights", "model_load_capacity", 3.0, r"## Could not find [\w.]+\.\* in model",
     "ExLlamaV2: the checkpoint lacks a layer the architecture expects"),
    # A checkpoint whose layout is not the launch's, in the trainers' own words:
    #   Megatron-LM (NVIDIA/Megatron-LM megatron/training/checkpointing.py check_checkpoint_args:
    #     assert "{arg} value from checkpoint ({v}) is not equal to the input argument value ({w})."):
    #     for tensor_model_parallel_size, pipeline_model_parallel_size (model_parallel_size in old
    #     checkpoints) the parallel layout against the checkpoint's, 3.5; for the model's shape
    #     (num_layers, hidden_size, num_attention_heads, the vocabulary and positions) the checkpoint
    #     is another model's, 3. Its batch and data-parallel settings compared there are the run's,
    #     not the model's, and are not taken. The same file's load_checkpoint: RuntimeError "(TP, PP)
    #     mismatch after resume ((t, p) vs (T, P) from checkpoint): not supported for
    #     DistributedOptimizer with sharding type ...", 3.5; its print of the same words ending "RNG
    #     state will be ignored" goes on and is not taken.
    #   DeepSpeed (deepspeedai/DeepSpeed deepspeed/runtime/engine.py _load_zero_checkpoint:
    #     ZeRORuntimeException "The checkpoint being loaded used a DP world size of N but the current
    #     world size is M. Automatic adjustment of ZeRO's optimizer state partitioning with a new world
    #     size is not currently supported."; deepspeed/runtime/state_dict_factory.py: assert "Invalid
    #     checkpoints and world size for sd merge" / "... for sd split", the model-parallel shards
    #     against the mp size asked for): the launch's GPUs do not divide as the checkpoint's did, 3.5.
    ("parallel_layout", "model_load_capacity", 3.5,
     r"\b(tensor_|pipeline_)?model_parallel_size value from checkpoint \(\d+\) is not equal to the input argument"
     r"|\(TP, PP\) mismatch after resume \(.*\): not supported for DistributedOptimizer"
     r"|The checkpoint being loaded used a DP world size of \d+ but the current world size is \d+"
     r"|Invalid checkpoints and world size for sd (merge|split)",
     "the parallel layout differs from the checkpoint's (Megatron-LM, DeepSpeed)"),
    ("weights", "model_load_capacity", 3.0,
     r"\b(num_layers|hidden_size|num_attention_heads|max_position_embeddings|padded_vocab_size"
     r"|make_vocab_size_divisible_by|add_position_embedding) value from checkpoint \(.*\) is not equal to the input",
     "Megatron-LM: the checkpoint's model shape differs from the arguments"),
    # The Hugging Face loaders' shape checks, each at its raise site:
    #   diffusers (huggingface/diffusers src/diffusers/models/model_loading_utils.py
    #     load_model_dict_into_meta: ValueError "Cannot load {path} because {param} expected shape
    #     {shape}, but got {shape}. If you want to instead overwrite randomly initialized weights, ...")
    #   accelerate (huggingface/accelerate src/accelerate/utils/modeling.py
    #     set_module_tensor_to_device: ValueError 'Trying to set a tensor of shape {s} in "{name}" (which
    #     has shape {t}), this looks incorrect.')
    #   a checkpoint tensor whose shape is not the model's, as PyTorch's "size mismatch for", 3.5.
    #   And accelerate's dispatch (src/accelerate/big_modeling.py dispatch_model: ValueError "We need
    #   an `offload_dir` to dispatch this model according to this `device_map`, the following
    #   submodules need to be offloaded: ..."): the device map sent layers to disk, the model fits
    #   neither the GPUs nor host memory, 3, as transformers' "had weights offloaded to the disk".
    ("weights", "model_load_capacity", 3.5,
     r"Cannot load .{0,300}because \S+ expected shape \S.*, but got \S"
     r"|Trying to set a tensor of shape \S.* in \"[^\"]+\" \(which has shape \S.*\), this looks incorrect",
     "diffusers/accelerate: a checkpoint tensor's shape differs from the model's"),
    ("gpu_memory", "model_load_capacity", 3.0,
     r"We need an `offload_dir` to dispatch this model according to this `device_map`",
     "accelerate: the device map offloads layers to disk (the model does not fit)"),

    # --- communication (tree step 4: one node works, several fail) ---
    ("nccl_error", "communication", 3.0,
     r"ncclSystemError|ncclRemoteError|ncclInternalError|ncclInvalidUsage|NCCL error|NCCL failure|Test NCCL failure"
     r"|unhandled system error|ProcessGroupNCCL.*(error|Error)|NCCL communicator was aborted|ncclCommInitRank failed",
     "NCCL collective failed"),
    # ncclInternalError as NCCL words it (src/init.cc ncclGetErrorString: "internal error -
    # please report this issue to the NCCL developers"), quoted without the "NCCL error" prefix
    # PyTorch and vLLM put before it.
    ("nccl_error", "communication", 3.0,
     r"internal error - please report this issue to the NCCL developers|NCCL internal error",
     "NCCL internal error"),
    ("nccl_error", "communication", 1.5, r"NCCL WARN", "NCCL warning"),
    ("nccl_peer", "communication", 4.0,
     r"remote process exited or there was a network error|Connection reset by peer"
     r"|Connection refused.*(nccl|NCCL|gloo|rank|store)"
     r"|socketStartConnect: Connect to .* failed|socketPollConnect|NET/Socket : (Connect|connect)",
     "peer or fabric failure"),
    ("bootstrap_iface", "communication", 4.0,
     r"Bootstrap : no socket interface found|neither AF_INET|no socket interface"
     r"|Unable to find address for|Cannot assign requested address", "no usable bootstrap interface"),
    # Interface variables named in a log are context only: set in most multi-node launches.
    ("iface_env", "communication", 0.5, r"NCCL_SOCKET_IFNAME|GLOO_SOCKET_IFNAME|NCCL_IB_HCA", "interface binding in play"),
    ("collective_timeout", "communication", 3.5,
     r"Watchdog caught collective operation timeout|ProcessGroupNCCL.*[Tt]imeout|collective operation timeout"
     r"|DistNetworkError|Timed out .*(rendezvous|store|barrier|init_process_group)|timed out after .*(store|barrier)",
     "collective or rendezvous timeout"),
    # XLA's rendezvous of a process's device threads (openxla/xla xla/service/rendezvous.cc: "This thread
    # has been waiting for `%s` for %d seconds and may be stuck. Expected %d threads to join the
    # rendezvous, but not all of them arrived on time.", then "Termination timeout for `%s` ...") on the
    # NCCL clique XLA sets up for a collective (the name "initialize clique for rank %d; clique=...",
    # "acquire clique for rank ..."): the NCCL communicator across the ranks is not completing, a peer
    # that never joins it, 2 (a symptom). Other rendezvous names (a program's own collective) are not taken.
    ("collective_timeout", "communication", 2.0,
     r"(waiting for|Termination timeout for) .(initialize|acquire) clique for rank \d+",
     "XLA: the NCCL clique's rendezvous is stuck"),
    # ProcessGroupNCCL's watchdog reporting a failed or hung collective (torch/csrc/distributed/
    # c10d/ProcessGroupNCCL.cpp: "Some NCCL operations have failed or timed out", "NCCL watchdog
    # thread terminated with exception", "ProcessGroupNCCL's watchdog got stuck for", "Heartbeat
    # monitor timed out"). 3: a rank that died of a CUDA error makes the others print it too.
    ("collective_timeout", "communication", 3.0,
     r"Some NCCL operations have failed or timed out|NCCL watchdog thread terminated with exception"
     r"|ProcessGroupNCCL's watchdog got stuck|Heartbeat monitor timed out", "NCCL watchdog: collective failed or hung"),
    # Gloo, the CPU backend every torch.distributed launch also opens (vLLM's and Ray's control
    # groups, DDP's object collectives), failing to reach its peers. torch/csrc/distributed/c10d/
    # ProcessGroupGloo.cpp logs "Gloo connectFullMesh failed with <gloo's error>"; gloo/transport/
    # tcp/pair.cc and pair.h raise "Connection closed by peer [addr]", "Socket unexpectedly closed",
    # "Read error", "Read timeout", "Write timeout", "Connect timeout"; helpers.h "SO_ERROR: ...
    # remote=[addr]". connectFullMesh at start: the peers never met (4, as "no socket interface");
    # the pair errors after it: 3, a peer that died of something else is also "closed by peer".
    ("gloo_connect", "communication", 4.0,
     r"Gloo connectFullMesh failed", "Gloo: the ranks could not connect to each other"),
    # Gloo's check that both ends of a pair use one address family (gloo/transport/tcp/device.cc
    # GLOO_ENFORCE_EQ(ss1.ss_family, ss2.ss_family), printed as "ss1.ss_family == ss2.ss_family.
    # 2 vs 10"): one rank resolved to IPv4, another to IPv6, an interface-binding problem.
    ("gloo_connect", "communication", 3.5,
     r"ss1\.ss_family == ss2\.ss_family", "Gloo: ranks bound to different address families"),
    ("gloo_connect", "communication", 3.0,
     r"(Connection closed by peer|Socket unexpectedly closed|Read error|Read timeout|Write timeout"
     r"|Connect timeout) \[[\w.:%-]+\]:\d+|SO_ERROR: .*remote=\[", "Gloo: a peer connection failed"),
    # Gloo's pair connecting to a peer's advertised address (gloo/transport/tcp/pair.cc: "connect "
    # + the peer + ": " + strerror): the peer is not listening where it said, often a hostname
    # that resolves to a loopback address, 3.
    ("gloo_connect", "communication", 3.0,
     r"\bconnect \[[\w.:%-]+\]:\d+: (Connection refused|Connection timed out|No route to host|Network is unreachable)",
     "Gloo: a peer's advertised address does not answer"),
    # The same pair error quoted without its peer address (gloo/transport/tcp/pair.cc "Connection
    # closed by peer " + the peer), and a receive or send that waited past the group's timeout
    # (gloo/transport/tcp/unbound_buffer.cc "Timed out waiting %dms for recv operation to
    # complete"). 2.5 and 3: a peer that died of something else closes its pairs too.
    ("gloo_connect", "communication", 2.5, r"Connection closed by peer", "Gloo: a peer closed the connection"),
    ("gloo_connect", "communication", 3.0, r"Timed out waiting \d+ms for (recv|send) operation to complete",
     "Gloo: a peer never answered"),
    ("rdma", "communication", 3.5,
     r"NET/IB|ibv_\w+ failed|ibv_modify_qp|\bQP\b.*(error|failed)|RDMA|IBGDA|GID index|mlx5.*(error|fail)"
     r"|local protection error|transport retry counter exceeded|wr_id", "InfiniBand/RDMA transport error"),
    # NCCL found no RDMA device or verbs library and fell back to TCP sockets: a multi-node server
    # still comes up, slow (docs/domain.md "Missing RDMA is silent"). NCCL says so at INFO ("NET/IB : No
    # device found", "Using network Socket"), which never decides; its WARN about libibverbs and
    # the communication gate's own verdict do.
    ("socket_fallback", "communication", 3.5,
     r"Failed to open libibverbs|NCCL used network Socket, not IB", "NCCL fell back to sockets (no RDMA)"),
    ("ep_transport", "communication", 3.5,
     r"NVSHMEM|nvshmem|DeepEP|deep_ep|pplx|all2all|all_to_all.*(fail|error)|ibgda",
     "expert-parallel transport (NVSHMEM/DeepEP) failed"),
    ("efa", "communication", 3.5,
     r"libfabric|\bEFA\b|efa_|fi_getinfo|OFI (NCCL )?plugin|aws-ofi-nccl|NET/OFI", "EFA/libfabric transport error"),
    ("cluster_join", "communication", 3.0,
     r"Failed to connect to GCS|GCS (server|client).*(timeout|failed|unavailable)"
     r"|Unable to connect to (the )?(Ray )?head"
     r"|ray\.init\(\) .*(failed|timed out)|The node with node id .* has been marked dead|RaySystemError"
     r"|failed to (join|register).*(cluster|head)|TCPStore.*(failed|timed out|Connection)|c10d.*(failed|timed out)"
     r"|Rendezvous.*(failed|timed out|closed)|MASTER_ADDR|ActorDiedError|ActorUnavailableError"
     # vLLM's front-end: its engine processes (remote ones on other nodes) never connected back
     r"|Timed out waiting for engines to send ?initial message",
     "worker cannot join the head or the control store"),
    # Ray's node-removed message as its worker prints it ("The node with node id: <id> and address:
    # <ip> ... has been marked dead because the detector has missed too many heartbeats from it",
    # python/ray/_private/worker.py; older Ray: "the monitor has missed"). The pattern above
    # misses the colon after "node id".
    ("cluster_join", "communication", 3.0,
     r"has been marked dead because the (detector|monitor) has missed too many heartbeats",
     "Ray: a node stopped answering the head"),
    # torch.distributed.elastic's rendezvous (torchrun) failing to gather the nodes: the exception
    # classes of torch/distributed/elastic/rendezvous/api.py, RendezvousConnectionError ("The
    # connection to the C10d store has failed") and RendezvousTimeoutError.
    ("cluster_join", "communication", 3.0, r"Rendezvous(Connection|Timeout)Error",
     "torchrun: the nodes never met at the rendezvous"),
    # torchrun's etcd rendezvous (torch/distributed/elastic/rendezvous/etcd_rendezvous_backend.py
    # create_backend: EtcdStore(client, "/torch/elastic/store"), key prefix "/torch/elastic/rendezvous")
    # failing in python-etcd's EtcdKeyNotFound ("Key not found : <key>") on one of those keys: the
    # store the nodes meet through does not hold what the rendezvous wrote, 3.
    ("cluster_join", "communication", 3.0, r"EtcdKeyNotFound: Key not found : /torch/elastic/",
     "torchrun: the etcd rendezvous store lost its keys"),
    # Open MPI (Horovod, mpirun launches) finding no transport between two ranks: its help texts
    # ompi/mca/bml/r2/help-mca-bml-r2.txt "At least one pair of MPI processes are unable to reach
    # each other for MPI communications" and orte/mca/oob/tcp/help-oob-tcp.txt "A process or daemon
    # was unable to complete a TCP connection to another process" (printed over two lines; the
    # first decides).
    ("cluster_join", "communication", 3.5,
     r"MPI processes are unable to reach each other|A process or daemon was unable to complete a TCP connection",
     "MPI: the ranks cannot reach each other"),
    # The c10d TCPStore client that every rank opens to MASTER_ADDR:MASTER_PORT
    # (torch/csrc/distributed/c10d/socket.cpp: "The client socket has timed out after ... while
    # trying to connect to", "The client socket has failed to connect to any network address of").
    ("cluster_join", "communication", 3.0,
     r"The client socket has (timed out after|failed to connect to)", "torch.distributed: no rendezvous store"),
    # The older c10d TCPStore client (torch/lib/c10d/Utils.hpp and Utils.cpp, PyTorch 1.x): a
    # store socket whose read or write timed out ("Socket Timeout", SYSCHECK on EAGAIN), a connect
    # that timed out ("connect() timed out."), and the store's listener that no rank reached
    # ("waiting for processes to connect has timed out"). The first is bare, so it must be the
    # exception's whole text.
    ("cluster_join", "communication", 3.0,
     r"RuntimeError: Socket Timeout\s*$|\bconnect\(\) timed out\."
     r"|waiting for processes to connect has timed out", "torch.distributed: the rendezvous store timed out"),
    # Ray before its GCS-only releases: a worker starting against the head's Redis
    # (python/ray/_private/services.py, Ray 1.x, wait_for_redis_to_start: "Unable to connect to
    # Redis at <ip>:<port> after N retries", "Unable to connect to Redis (after N retries)").
    ("cluster_join", "communication", 3.0,
     r"Unable to connect to Redis (at \S+ after \d+ retries|\(after \d+ retries\))",
     "Ray: a worker cannot reach the head's Redis"),
    # A Ray driver (vLLM's engine, ray.init(address=...)) that finds no raylet of the cluster on its
    # own node or address (python/ray/_private/services.py get_node_to_connect_for_driver: "No node
    # info found matching attributes: ... when trying to resolve node to connect to"): the process
    # never joined the cluster, tree step 4's join, 3.
    ("cluster_join", "communication", 3.0, r"No node info found matching attributes",
     "Ray: the driver found no cluster node to attach to"),
    # A worker or driver that cannot reach its node's raylet (src/ray/raylet_client/raylet_client.cc:
    # "Retrying to connect to socket for pathname %s", then RAY_LOG(FATAL) "Could not connect to
    # socket %s"): the node's raylet is gone (the node left the cluster), 3.
    ("cluster_join", "communication", 3.0,
     r"Could not connect to socket \S*raylet|Retrying to connect to socket for pathname \S*raylet",
     "Ray: the node's raylet is gone"),
    ("p2p_nvlink", "communication", 2.0,
     r"P2P (access|is) (not|disabled)|peer access is not supported|NVLink.*(error|down|inactive)"
     r"|custom allreduce.*(fail|disabled)"
     r"|cudaErrorPeerAccess", "peer-to-peer / NVLink path"),
    # TensorRT-LLM's custom all-reduce enabling peer access inside the tensor-parallel group
    # (tensorrt_llm/_ipc_utils.py set_peer_access: RuntimeError(f"Can't enable access between nodes
    # {src_node} and {dest_node}") where cudaDeviceCanAccessPeer answers 0): two GPUs of one host
    # without a peer path (PCIe host bridge, no NVLink), as NCCL's refused peer access, 3.
    ("p2p_nvlink", "communication", 3.0, r"Can't enable access between nodes \d+ and \d+",
     "TensorRT-LLM: CUDA peer access between two GPUs not possible"),

    # NCCL's socket layer losing its peer (src/misc/socket.cc: WARN "socketProgress: Connection closed
    # by remote peer %s", ncclRemoteError; older releases "Net : Connection closed by remote peer"):
    # the peer rank went away, 3 (a peer that died of something else closes its socket too).
    ("nccl_peer", "communication", 3.0, r"Connection closed by remote peer", "NCCL: a peer closed its socket"),
    # NCCL's bootstrap receiving a message of another size than it expects (src/bootstrap.cc WARN
    # "Message truncated : received %d bytes instead of %d"), the ranks run different NCCL versions;
    # and its proxy failing to reach a local rank's proxy thread (src/proxy.cc WARN "Proxy Call to
    # rank %d failed (%s)"). Both the communicator's own setup, 3.
    ("nccl_error", "communication", 3.0,
     r"Message truncated : received \d+ bytes instead of \d+|Proxy Call to rank \d+ failed",
     "NCCL bootstrap or proxy failed between ranks"),
    # The c10d TCPStore server waiting for the ranks (torch/csrc/distributed/c10d/TCPStore.cpp and
    # TCPStoreLibUvBackend.cpp: DistStoreError "Timed out after N seconds waiting for clients. M/W
    # clients joined."): some nodes never reached MASTER_ADDR, 3.5. And the store client whose server
    # went away (c10d/Utils.hpp recvBytes "Failed to recv, got 0 bytes. Connection was likely
    # closed."): 2.5, a head that died of something else closes the store too.
    ("cluster_join", "communication", 3.5,
     r"waiting for clients\. \d+/\d+ clients joined", "torch.distributed: not every rank reached the store"),
    ("cluster_join", "communication", 2.5, r"Failed to recv, got 0 bytes",
     "torch.distributed: the store connection closed"),
    # Horovod's stall inspector (horovod/common/stall_inspector.cc: "One or more tensors were
    # submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for
    # remainder of ranks"), a collective some ranks never joined, 3; and its shutdown status
    # (horovod/common/operations.cc SHUT_DOWN_ERROR "Horovod has been shut down. This was caused by
    # an exception on one of the ranks"), another rank failed, 2.
    ("collective_timeout", "communication", 3.0,
     r"One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks",
     "Horovod: a collective waits for ranks that never joined"),
    ("nccl_peer", "communication", 2.0, r"Horovod has been shut down\. This was caused by an exception on one of the",
     "Horovod: another rank failed"),
    # Open MPI's and PRRTE's runtime losing or never starting the daemons of the other nodes
    # (orte/mca/errmgr and prrte src/mca/errmgr help texts: "ORTE has lost communication with a
    # remote daemon", "PRTE has lost communication with a remote daemon"; orte/mca/plm help-plm-base
    # "ORTE was unable to reliably start one or more daemons", which a missing orted on a node also
    # prints: 2.5).
    ("cluster_join", "communication", 3.0, r"(ORTE|PRTE) has lost communication with a remote daemon",
     "MPI: a remote node's daemon stopped answering"),
    ("cluster_join", "communication", 2.5, r"(ORTE|PRTE) was unable to reliably start one or more daemons",
     "MPI: the daemons on the other nodes did not start"),
    # InfiniBand's "transport retry count exceeded" completion in UCX's words (openucx/ucx
    # src/uct/ib/mlx5/ib_mlx5_log.c: "Transport retry count exceeded", UCS_ERR_ENDPOINT_TIMEOUT):
    # the remote port stopped acknowledging, as NCCL's "transport retry counter exceeded" above, 3.5.
    ("rdma", "communication", 3.5, r"Transport retry count exceeded", "UCX/IB: the remote port stopped answering"),

    # NCCL's bootstrap root receiving ranks that disagree on the communicator's size (src/bootstrap.cc
    # WARN "Bootstrap Root : mismatch in rank count from procs %d : %d"): two launches met on one
    # unique id, or the nodes were started with different world sizes, 3.
    ("nccl_error", "communication", 3.0, r"Bootstrap Root : mismatch in rank count from procs",
     "NCCL: the ranks disagree on the communicator's size"),
    # CUDA error 220 (cudaErrorNvlinkUncorrectable, "uncorrectable NVLink error was detected during the
    # execution"): the NVLink fabric between the GPUs failed, 3.
    ("p2p_nvlink", "communication", 3.0,
     r"uncorrectable NVLink error was detected|cudaErrorNvlinkUncorrectable|CUDA_ERROR_NVLINK_UNCORRECTABLE",
     "CUDA error 220: uncorrectable NVLink error"),
    # c10d resolving the rendezvous host (torch/csrc/distributed/c10d/socket.cpp: "The IPv6 network
    # addresses of (%s, %s) cannot be retrieved (gai error: %d - %s)", the IPv4 form likewise): the
    # name MASTER_ADDR gives does not resolve everywhere. c10d logs it as a warning and tries the
    # other family, so 2.
    ("cluster_join", "communication", 2.0, r"network addresses of .* cannot be retrieved \(gai error",
     "torch.distributed: the rendezvous host name does not resolve"),
    # A Ray worker whose node's raylet is gone before it starts (src/ray/core_worker/
    # core_worker_process.cc: "Failed to get the system config from raylet because it is dead. Worker
    # will terminate."): the node is not (or no longer) part of the cluster, 3.
    ("cluster_join", "communication", 3.0, r"Failed to get the system config from raylet because it is dead",
     "Ray: the node's raylet is gone"),

    # Multi-node launchers reaching the other nodes over ssh: DeepSpeed's runner checks the first
    # host of its hostfile (deepspeed/launcher/runner.py: "Using hostfile at %s but host=%s was not
    # reachable via ssh"), 3; pdsh, which it launches through, reports ssh's own failure as exit
    # code 255 (pdsh's ssh module: "%s: ssh exited with exit code %d"; 255 is ssh's connection
    # error, other codes are the remote command's), 2.5.
    ("cluster_join", "communication", 3.0, r"was not reachable via ssh",
     "DeepSpeed: another node of the hostfile is unreachable"),
    ("cluster_join", "communication", 2.5, r"ssh exited with exit code 255\b",
     "pdsh: ssh could not reach a node"),

    # Slurm's PMIx plugin timing out a fence the ranks of other nodes never joined (SchedMD/slurm
    # src/plugins/mpi/pmix/pmixp_coll_tree.c and pmixp_coll_ring.c: PMIXP_ERROR "%p: collective timeout
    # seq=%d"): the launch's own collective across nodes, 3.5 as a NCCL watchdog timeout. And a Ray
    # worker unable to register with its node's raylet (src/ray/core_worker/core_worker_process.cc:
    # "Failed to register worker to Raylet: IOError: ..."; earlier src/ray/core_worker/core_worker.cc:
    # "Failed to register worker " << worker_id << " to Raylet. " with the status, whose IOError is
    # src/ray/raylet_client/raylet_client.cc's "[RayletClient] Unable to register worker with
    # raylet."), the raylet gone, 2.5.
    ("collective_timeout", "communication", 3.5, r": collective timeout seq=\d+",
     "Slurm PMIx: a fence across nodes timed out"),
    ("cluster_join", "communication", 2.5,
     r"Failed to register worker (\w+ )?to Raylet|\[RayletClient\] Unable to register worker with raylet",
     "Ray: a worker cannot register with its raylet"),

    # NCCL's WARN texts of the transport and bootstrap (NVIDIA/nccl, file beside each):
    #   bootstrap.cc, transport/net_socket.cc  "NET/Socket : No usable listening interface found",
    #       "NET/Socket : no interface found", "no device found matching %s, verify
    #       NCCL_OOB_NET_IFNAME" (no interface to bind: 4, as "Bootstrap : no socket interface")
    #   init.cc    "Mismatched NCCL version detected : rank %d version %d ..."; ras/ras.cc "NCCL version
    #       mismatch with remote peer" (nodes on different NCCL builds, 3)
    #   plugin/net.cc  "Failed to initialize any NET plugin"; transport.cc "No transport found for rank
    #       %d[%lx] -> rank %d[%lx]" (no way between two ranks, 3.5)
    #   init.cc    "Detected mixed local Net device counts across ranks"; graph/rings.cc "Error : ring %d
    #       does not loop back to start" (the nodes see different topologies, 3)
    #   mnnvl.cc   "MNNVL (cliqueSize %d) is available but not working on this system. Check the IMEX
    #       ... configuration" (multi-node NVLink not set up, 3)
    #   transport/p2p.cc, net.cc  "failed to peer with device %d" (CUDA peer access refused, 2.5)
    #   transport/net_ib*.cc  "ibv_post_send() failed", "Call to ibv_poll_cq() returned" (3.5, as the
    #       other verbs failures)
    ("bootstrap_iface", "communication", 4.0,
     r"NET/Socket : (No usable listening interface found|no interface found)"
     r"|no device found (matching|after excluding) .*verify NCCL_OOB_NET_IFNAME",
     "NCCL: no usable network interface"),
    ("nccl_error", "communication", 3.0,
     r"Mismatched NCCL version detected|NCCL version mismatch with remote peer"
     r"|Detected mixed local Net device counts across ranks|Error : ring \d+ does not loop back to start"
     r"|MNNVL \(cliqueSize \d+\) is available but not working",
     "NCCL: the ranks disagree (version, topology) or MNNVL is not set up"),
    ("nccl_error", "communication", 3.5, r"Failed to initialize any NET plugin|No transport found for rank",
     "NCCL: no network transport between the ranks"),
    ("p2p_nvlink", "communication", 2.5, r"failed to peer with device \d+", "NCCL: CUDA peer access refused"),
    ("rdma", "communication", 3.5, r"ibv_\w+\(\) (failed|returned)", "InfiniBand verbs call failed"),

    # UCX's own error level (openucx/ucx src/ucs/debug/log.c prints "UCX  ERROR" before the message):
    # UCX is the transport of Open MPI's pml/ucx, UCC and NIXL, so its errors are the transport's;
    # generic, 1.5 as "NCCL WARN", the message decides. Open MPI's UCX PML failing to reach a peer
    # (ompi/mca/pml/ucx/pml_ucx.c: "ucp_ep_create(proc=%d) failed: %s"), 3.
    ("ucx", "communication", 1.5, r"\bUCX\s+ERROR\b", "UCX transport error (generic: the message decides)"),
    ("ucx", "communication", 3.0, r"ucp_ep_create\(proc=\d+\) failed", "Open MPI/UCX: no endpoint to a peer rank"),

    # The c10d store client's other timeouts and the NCCL id exchange through it
    # (torch/csrc/distributed/c10d/TCPStore.cpp doWait: DistStoreError "Socket Timeout", since 2.3
    # "wait timeout after %dms, keys: ..."; ProcessGroupNCCL.cpp broadcastUniqueNCCLID: "[%d] is
    # setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by
    # key '%s', but store->get('%s') got error: ..."): a key another rank should have published
    # never came, 3 (that rank may have died of something else).
    ("cluster_join", "communication", 3.0,
     r"DistStoreError: Socket Timeout\s*$|wait timeout after \d+ms, keys: "
     r"|retrieving ncclUniqueId from \[\d+\] via c10d key-value store",
     "torch.distributed: a key of another rank never reached the store"),

    # Ray's driver finding its own node's address neither the GCS's nor any raylet's
    # (src/ray/gcs/gcs_client/global_state_accessor.cc GetNodeToConnectForDriver: "This node has an
    # IP address of %s, and Ray expects this IP address to be either the GCS address or one of the
    # Raylet addresses"): the node joined under another interface's address, tree step 4's
    # interface binding, 3.
    ("cluster_join", "communication", 3.0,
     r"Ray expects this IP address to be either the GCS address or one of the Raylet addresses",
     "Ray: the node's address is not the one it joined with"),
    # MPICH's Hydra launcher failing to reach another node's proxy (src/pm/hydra utils/sock/sock.c
    # HYDU_sock_connect: "unable to connect from \"%s\" to \"%s\" (%s)"), the MPI launch across
    # nodes, as Open MPI's daemons above, 3.
    ("cluster_join", "communication", 3.0, r'unable to connect from "[^"]*" to "[^"]*"',
     "MPICH Hydra: a node's proxy cannot be reached"),
    # Fabric Manager reporting a fatal NVSwitch error (its log: "detected NVSwitch fatal error %d on
    # fid %d on NVSwitch pci bus id ..."): the NVLink fabric between the node's GPUs failed, as CUDA
    # error 220, 3. Its non-fatal errors are not taken.
    ("p2p_nvlink", "communication", 3.0, r"detected NVSwitch fatal error \d+",
     "Fabric Manager: a fatal NVSwitch error"),

    # Ray's cluster membership from both ends: a driver started with address="auto" or RAY_ADDRESS
    # finding no cluster to join (python/ray/_private/services.py canonicalize_bootstrap_address:
    # ConnectionError "Could not find any running Ray instance"), and the GCS declaring a node dead
    # (src/ray/gcs/gcs_health_check_manager.cc FailNode: "Node %s is dead because the health check
    # failed.", a WARNING). Both the node not (or no longer) in the cluster, 3.
    ("cluster_join", "communication", 3.0,
     r"Could not find any running Ray instance|is dead because the health check failed",
     "Ray: no cluster to join, or a node lost to the GCS's health check"),
    # GPUDirect RDMA's kernel module not loading (kmod's "could not insert 'nvidia_peermem': Invalid
    # argument" when it was built without MLNX_OFED's peer-memory symbols): NCCL then runs without
    # GPUDirect over InfiniBand, the transport between nodes, 3. And the verbs library finding no
    # RDMA device at all (rdma-core libibverbs/examples and perftest: "No IB devices found", "Failed
    # to get IB devices list"): NCCL falls back to sockets, 2.5.
    ("rdma", "communication", 3.0, r"could not insert 'nvidia[_-]peermem'",
     "GPUDirect RDMA's nvidia-peermem module does not load"),
    ("socket_fallback", "communication", 2.5, r"No IB devices found|Failed to get IB devices list",
     "no RDMA device visible (NCCL falls back to sockets)"),

    # Open MPI's openib BTL failing to open an HCA (ompi/mca/btl/openib help-mpi-btl-openib.txt:
    # "WARNING: There was an error initializing an OpenFabrics device."): UCX usually carries the
    # traffic instead and the warning is common on healthy runs, so context, 1.5.
    ("rdma", "communication", 1.5, r"There was an error initializing an OpenFabrics device",
     "Open MPI openib: an HCA did not initialize (context)"),

    # --- other (no GPU cause: these make a GPU-looking noise line lose) ---
    ("hub_access", "other", 3.0,
     r"couldn't connect to 'https://huggingface\.co'|LocalEntryNotFoundError|GatedRepoError|401 Client Error"
     r"|RepositoryNotFoundError|Cannot access gated repo|HF_HUB_OFFLINE|Max retries exceeded with url: /api/models",
     "model hub access (network, token, gated repo)"),
    ("python_env", "other", 2.5,
     r"ModuleNotFoundError|ImportError: |undefined symbol|No module named|cannot import name"
     r"|GLIBC_\S+ not found|version `GLIBCXX", "Python/library environment broken"),
    # A CPU-only PyTorch build (torch/cuda/__init__.py _lazy_init: "Torch not compiled with CUDA
    # enabled"): the wheel, not the GPU path, so not the tree's step 2.
    ("python_env", "other", 2.5, r"Torch not compiled with CUDA enabled", "PyTorch built without CUDA"),
    # CUDA initialised in the parent, then used in a forked worker (torch/cuda/__init__.py
    # _lazy_init: "Cannot re-initialize CUDA in forked subprocess. To use CUDA with
    # multiprocessing, you must use the 'spawn' start method"). The launch's start method, not the
    # driver or the container: vLLM's fix is VLLM_WORKER_MULTIPROC_METHOD=spawn.
    ("python_env", "other", 3.0, r"Cannot re-initialize CUDA in forked subprocess",
     "CUDA used in a forked worker process"),
    ("config", "other", 2.5,
     r"Model architectures? \[.*\] (is|are) not supported|not supported for now|unrecognized arguments"
     r"|error: argument|ValidationError|trust_remote_code|Unrecognized (model|configuration)"
     r"|tokenizer.*(not found|error)",
     "launch arguments or model config"),
    ("port", "other", 3.0, r"Address already in use|port .* (is )?already in use|EADDRINUSE", "port already in use"),
    # The prefix-cache proof's own verdicts (k3rollout/stages/features.py, prefix_cache_proof): the
    # server answers, and does not reuse a repeated prefix. Caching switched off
    # (--no-enable-prefix-caching) or broken in the release is a serving setting, not a GPU cause
    # (docs/domain.md, "Prefix cache"), 3.
    ("prefix_cache", "other", 3.0,
     r"no prefix-cache hits on the repeated prefix|hits did not behave as a prefix cache should",
     "the prefix-cache proof: a repeated prefix is not served from the cache"),
    # A launcher given a node rank its node count does not have: accelerate's notebook_launcher
    # (src/accelerate/launchers.py: "The node_rank must be less than the number of nodes.") and the
    # launch scripts written on its model ("NODE_RANK must be less than NNODES"). The launch command
    # is wrong on that node; nothing in the GPU stack failed, 3.
    ("config", "other", 3.0, r"node[_ ]rank\b\W*(=\s*\d+\s*)?must be less than",
     "a node rank at or above the launch's node count"),
    # The hub not serving the model, in transformers' and huggingface_hub's words
    # (transformers src/transformers/utils/hub.py: "X is not a local folder and is not a valid model
    # identifier listed on 'https://huggingface.co/models'"; huggingface_hub file_download.py and
    # _snapshot_download.py: "Cannot find an appropriate cached snapshot folder for the specified
    # revision on the local disk and outgoing traffic has been disabled").
    ("hub_access", "other", 3.0,
     r"is not a local folder and is not a valid model identifier|Cannot find an appropriate cached snapshot folder",
     "model hub: the model id cannot be resolved"),
    # The hub refusing or unreachable at the HTTP level (huggingface_hub utils/_http.py
    # hf_raise_for_status, requests' "%s Client Error: %s for url: %s"; urllib3's MaxRetryError
    # "HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded").
    ("hub_access", "other", 3.0,
     r"(403|404|429) Client Error.*huggingface\.co|HTTPSConnectionPool\(host='[\w.-]*(huggingface\.co|hf\.co)'",
     "model hub unreachable or refusing (HTTP)"),
    # A model type the installed transformers does not know (transformers src/transformers/models/auto/
    # configuration_auto.py: "The checkpoint you are trying to load has model type `X` but
    # Transformers does not recognize this architecture"): the library is older than the model, as
    # vLLM's "Model architectures [...] are not supported" above. And jax newer than its jaxlib
    # (jax/version.py _check_jaxlib_version: "jaxlib is version X, but this version of jax requires
    # version >= Y"): the environment's packages, not the driver; the other direction, a jaxlib newer
    # than jax, is with the package-version texts below.
    ("config", "other", 3.0, r"but Transformers does not recognize this architecture",
     "transformers does not know the model type"),
    ("python_env", "other", 2.5, r"jaxlib is version \S+, but this version of jax requires",
     "jax newer than its jaxlib"),
    # The Python environment not installable or not matching (pip's resolver: "Could not find a
    # version that satisfies the requirement", "No matching distribution found for"; PyTorch's
    # operator registry, "operator torchvision::nms does not exist", when torchvision was built for
    # another torch).
    ("python_env", "other", 2.5,
     r"Could not find a version that satisfies the requirement|No matching distribution found for"
     r"|operator torchvision::\w+ does not exist", "Python/library environment broken"),
    # A cuDNN other than the one the framework was built against (TensorFlow/XLA
    # stream_executor/cuda/cuda_dnn.cc: LOG(ERROR) "Loaded runtime CuDNN library: X but source was
    # compiled with: Y. CuDNN library needs to have matching major version and equal or higher minor
    # version"; PyTorch torch/backends/cudnn/__init__.py: RuntimeError "cuDNN version incompatibility:
    # PyTorch was compiled against (9, 8, 0) but found runtime version (9, 1, 1)", a system cuDNN on
    # LD_LIBRARY_PATH ahead of the wheel's; TensorFlow 0.x's cuda_dnn.cc "Loaded cudnn library: N but
    # source was compiled against M.  If using a binary install, upgrade your cudnn library to match.").
    # The image's libraries, not the driver: the environment, 3.
    ("python_env", "other", 3.0,
     r"Loaded runtime CuDNN library: \S+ but source was compiled with|cuDNN version incompatibility: PyTorch was compiled"
     r"|Loaded cudnn library: \d+ but source was compiled against \d+",
     "cuDNN of another version than the framework was built with"),
    # XLA finding neither ptxas/nvlink nor nvJitLink to assemble its kernels (xla/stream_executor/cuda/
    # assemble_compilation_provider.cc: "No PTX compilation provider is available. Neither
    # ptxas/nvlink nor nvjtlink is available. As a fallback you can enable JIT compilation in the CUDA
    # driver via the flag ..."): the image lacks the CUDA compiler tools (a runtime image, no
    # nvidia-cuda-nvcc wheel), the environment's, 3.
    ("python_env", "other", 3.0, r"No PTX compilation provider is available",
     "XLA: no ptxas or nvJitLink in the environment"),
    # JAX's CUDA plugin checking the CUDA libraries it loads against those it was built with
    # (jax-ml/jax jax/_src/xla_bridge.py _check_cuda_versions, later jax_plugins/cuda/__init__.py:
    # RuntimeError "Found {name} version {version}, but JAX was built against version {build}, which
    # is newer.", then "Outdated {name} installation found." with "Version JAX was built against:",
    # for CUDA, cuDNN, cuFFT, cuSOLVER, cuPTI, cuBLAS and cuSPARSE). The "CUDA" there is the runtime
    # (cudaRuntimeGetVersion of the libcudart loaded, most often a pip nvidia-*-cu12 wheel pinned by
    # another package), not the driver: the environment's, as the cuDNN mismatch above, 3.
    ("python_env", "other", 3.0,
     r"Found (CUDA|cuDNN|cuFFT|cuSOLVER|cuPTI|cuBLAS|cuSPARSE) version \d+, but JAX was built against version"
     r"|Outdated (CUDA|cuDNN|cuFFT|cuSOLVER|cuPTI|cuBLAS|cuSPARSE) installation found",
     "JAX: a CUDA library older than the one JAX was built against"),

    # The libraries around the servers refusing the installed CUDA stack (the build, not the driver):
    #   DeepSpeed deepspeed/ops/op_builder/builder.py CUDAMismatchException: "Installed CUDA version X
    #     does not match the version torch was compiled with Y, unable to compile cuda/cpp extensions
    #     without a matching cuda version" (the toolkit's nvcc against torch's, 3)
    #   xFormers xformers/_cpp_lib.py: "xFormers can't load C++/CUDA extensions. xFormers was built
    #     for: PyTorch X with CUDA Y (you have Z)" (a wheel for another torch, 2.5, printed as a warning)
    #   bitsandbytes bitsandbytes/cextension.py: RuntimeError "CUDA Setup failed despite GPU being
    #     available" (3), and the warning "The installed version of bitsandbytes was compiled without
    #     GPU support" (2: a host without a GPU prints it too)
    #   vLLM distributed/device_communicators/pynccl_wrapper.py: logger.error "Failed to load NCCL
    #     library from %s" (libnccl missing or broken in the image, VLLM_NCCL_SO_PATH; 2.5)
    ("python_env", "other", 3.0,
     r"does not match the version torch was compiled with \S+, unable to compile cuda/cpp extensions",
     "DeepSpeed: the CUDA toolkit differs from torch's"),
    ("python_env", "other", 2.5, r"xFormers can't load C\+\+/CUDA extensions",
     "xFormers: built for another torch or CUDA"),
    ("python_env", "other", 3.0, r"CUDA Setup failed despite GPU being available",
     "bitsandbytes: its CUDA library does not load"),
    ("python_env", "other", 2.0, r"installed version of bitsandbytes was compiled without GPU support",
     "bitsandbytes: a build without CUDA"),
    # llama-cpp-python refusing a tensor split longer than the devices its llama.cpp was built for
    # (abetlen/llama-cpp-python llama_cpp/llama.py Llama.__init__: ValueError "Attempt to split tensors
    # that exceed maximum supported devices. Current LLAMA_MAX_DEVICES={n}"). n is llama_max_devices()
    # of ggml-org/llama.cpp llama.cpp, which returned GGML_CUDA_MAX_DEVICES (16) for a CUDA build and
    # 1 for a build without a GPU backend (or Metal's one device): at 1 the package is a CPU build,
    # the environment's as "Torch not compiled with CUDA enabled", 3. A split over 16 GPUs is not taken.
    ("python_env", "other", 3.0,
     r"Attempt to split tensors that exceed maximum supported devices\. Current LLAMA_MAX_DEVICES=1\b",
     "llama-cpp-python: a build without GPU support given a tensor split"),
    # ONNX Runtime unable to load its CUDA or TensorRT provider library because a CUDA toolkit or cuDNN
    # library it links is missing (microsoft/onnxruntime onnxruntime/core/platform/posix/env.cc
    # LoadDynamicLibrary: "Failed to load library " + name + " with error: " + dlerror(), called for
    # libonnxruntime_providers_cuda.so by core/session/provider_bridge_ort.cc): the onnxruntime-gpu
    # build wants a cuDNN or CUDA major the environment does not have (libcudnn.so.8 beside CUDA 12),
    # the environment's as the cuDNN mismatch above, 3. The driver's libcuda.so.1 missing is step 2's
    # ("cannot open shared object" above) and is not matched here.
    ("python_env", "other", 3.0,
     r"Failed to load library libonnxruntime_providers_\w+\.so with error: "
     r"lib(cudnn|cublas|cublasLt|cudart|cufft|curand|cusparse|cusolver|nvrtc|nvinfer)\w*\.so[.\d]*: cannot open shared object",
     "ONNX Runtime: a CUDA or cuDNN library its GPU provider needs is missing"),
    # Unsloth's installer (unslothai/unsloth unsloth/_auto_install.py: RuntimeError "Torch = {v} too
    # new!") meeting a torch release newer than any extra it knows: the Python environment's
    # versions, not the driver, 3.
    ("python_env", "other", 3.0, r"Torch = \S+ too new!", "Unsloth: the installed torch is newer than it supports"),
    ("python_env", "other", 2.5, r"Failed to load NCCL library from",
     "vLLM: the NCCL library is missing or broken"),
    # llama.cpp meeting a GGUF whose architecture it does not know (src/llama-model.cpp load_arch:
    # "unknown model architecture: '%s'", under "error loading model architecture"): the build is
    # older than the model, as transformers' "does not recognize this architecture", 3.
    ("config", "other", 3.0, r"unknown model architecture: '", "llama.cpp: the build does not know the model"),

    # Triton compiling its launcher stubs at the first kernel (python/triton/runtime/build.py:
    # RuntimeError "Failed to find C compiler. Please specify via CC environment variable"; gcc's
    # "fatal error: Python.h: No such file or directory" when the image lacks the Python headers):
    # a slim image without a compiler or headers, the environment, 3 and 2.5 (gcc's is generic).
    ("python_env", "other", 3.0, r"Failed to find C compiler\. Please specify via CC",
     "Triton: no C compiler in the image"),
    ("python_env", "other", 2.5, r"Python\.h: No such file or directory", "no Python headers in the image"),
    # A Rust server's bind failure as std::io::Error's Debug form prints it (TGI's router,
    # "Os { code: 98, kind: AddrInUse, message: \"Address in use\" }"): the port is taken, 3.
    ("port", "other", 3.0, r"kind: AddrInUse\b", "port already in use (Rust io error)"),

    # torchvision built for another CUDA major than torch (torchvision/extension.py
    # _check_cuda_version: "Detected that PyTorch and torchvision were compiled with different CUDA
    # major versions"), as the operator registry's mismatch above, 3. A --quantization flag that
    # contradicts the checkpoint's (vLLM config/model.py and SGLang's model_config.py: "Quantization
    # method specified in the model config (X) does not match the quantization method specified in
    # the `quantization` argument (Y)"): the launch arguments, 3.
    ("python_env", "other", 3.0, r"PyTorch and torchvision were compiled with different CUDA major versions",
     "torchvision built for another CUDA than torch"),
    ("config", "other", 3.0, r"does not match the quantization method specified in the .quantization. argument",
     "launch: --quantization contradicts the checkpoint"),

    # text-generation-inference's launcher rejecting its own arguments before any shard starts
    # (launcher/src/main.rs LauncherError::ArgumentValidation, printed "Error:
    # ArgumentValidation(\"`max_input_tokens` must be < `max_total_tokens`\")"): the launch's flags, 3.
    ("config", "other", 3.0, r"Error: ArgumentValidation\(", "TGI: the launcher's arguments do not validate"),
    # Its router rejecting a request that asks for more new tokens than the launch allows
    # (router/src/validation.rs ValidationError::MaxNewTokens "`max_new_tokens` must be <= {0}.
    # Given: {1}"): the request against the launch's limits, 3. Not its MaxTotalTokens ("`inputs`
    # tokens + `max_new_tokens` must be <= N"), a prompt longer than the context.
    ("config", "other", 3.0, r"(?<!\+ )`max_new_tokens` must be <= \d+",
     "TGI: the request's max_new_tokens above the launch's limit"),

    # PyTorch's C++/CUDA extension builder, which DeepSpeed's ops, flash-attention's and other
    # packages' JIT builds run through (torch/utils/cpp_extension.py: OSError "CUDA_HOME environment
    # variable is not set. Please set it to your CUDA install root.", RuntimeError "Ninja is required
    # to load C++ extensions", RuntimeError "Error building extension '%s'"): no toolkit, no ninja or
    # a compile that failed in the image, the environment, 3, 3 and 2.5 (the compiler's own lines
    # follow the last).
    ("python_env", "other", 3.0,
     r"CUDA_HOME environment variable is not set|Ninja is required to load C\+\+ extensions",
     "torch cpp_extension: no CUDA toolkit or ninja for a JIT build"),
    ("python_env", "other", 2.5, r"Error building extension '", "torch cpp_extension: a JIT extension build failed"),

    # transformers' loader missing an optional package its arguments need (src/transformers/
    # modeling_utils.py: ImportError "FlashAttention2 has been toggled on, but it cannot be used due to
    # the following error: the package flash_attn seems to be not installed", ValueError "Using a
    # `device_map` ... requires `accelerate`. You can install it with `pip install accelerate`"): the
    # environment, 3.
    ("python_env", "other", 3.0,
     r"the package flash_attn seems to be not installed|requires `accelerate`\. You can install it with",
     "transformers: flash-attn or accelerate not installed"),

    # git refusing to pull into a checkout with an unresolved merge (git/git advice.c
    # error_resolve_conflict: "Pulling is not possible because you have unmerged files." and its
    # merge/commit/cherry-pick/revert/rebase forms; die_resolve_conflict: "Exiting because of an
    # unresolved conflict."): an application's update script that runs git pull (text-generation-webui's)
    # left its tree half-updated, the environment's, 3.
    ("python_env", "other", 3.0,
     r"(Pulling|Merging|Committing|Cherry-picking|Reverting|Rebasing) is not possible because you have unmerged files"
     r"|Exiting because of an unresolved conflict",
     "git: the checkout has an unresolved merge (a half-applied update)"),

    # Version pins and ABIs between the image's own packages, each refused by the package that
    # checks it (docs/domain.md, "Triage: the decision tree", the environment texts from package
    # and build sources): the wheels in the image, not the driver or the GPU path, 3.
    #   jax-ml/jax jax/_src/lib/__init__.py check_jaxlib_version: RuntimeError "jaxlib version X is
    #     newer than and incompatible with jax version Y. Please update your jax and/or jaxlib
    #     packages." (the other direction of the "jaxlib is version X" check above)
    #   numpy/numpy numpy/core/_multiarray_umath.py __getattr__ (NumPy 2.x): "A module that was
    #     compiled using NumPy 1.x cannot be run in / NumPy 2.0.0 as it may crash."; and the C-API
    #     check every extension runs at import, numpy/_core/code_generators/generate_numpy_api.py
    #     _import_array: "module compiled against ABI version 0x%x but this version of numpy is
    #     0x%x", "module was compiled against NumPy C-API version 0x%x (NumPy X) but the running
    #     NumPy has C-API version 0x%x" (in NumPy 1.x: "module compiled against API version 0x%x but
    #     this version of numpy is 0x%x", and AttributeError "_ARRAY_API not found" when the
    #     module's NumPy 1.x header meets a NumPy 2.x)
    #   protocolbuffers/protobuf python/message.c PyUpb_Message_CheckCalledFromGeneratedFile:
    #     TypeError "Descriptors cannot be created directly. / If this call came from a _pb2.py file,
    #     your generated code is out of date and must be regenerated with protoc >= 3.19.0."; and
    #     python/google/protobuf/runtime_version.py: VersionError "Detected incompatible Protobuf
    #     Gencode/Runtime versions when loading X" ("... mismatched ... major versions" earlier).
    #     Its warning "Protobuf gencode version X is exactly one major version older than the runtime
    #     version" goes on and is not taken.
    #   huggingface/transformers src/transformers/utils/versions.py require_version: ImportError "X
    #     is required for a normal functioning of this module, but found Y==Z.", and
    #     PackageNotFoundError "The 'X' distribution was not found and is required by this
    #     application." (the generic ImportError line above at 2.5 took only the first)
    #   pytorch/audio src/torchaudio/_extension/utils.py _check_cuda_version: RuntimeError "Detected
    #     that PyTorch and TorchAudio were compiled with different CUDA versions." (torchvision's
    #     twin is above: the two wheels' builds, not the driver)
    ("python_env", "other", 3.0,
     r"jaxlib version \S+ is newer than and incompatible with jax version", "jax older than its jaxlib"),
    ("python_env", "other", 3.0,
     r"A module that was compiled using NumPy 1\.x cannot be run in"
     r"|module compiled against (ABI|API) version 0x[0-9a-f]+ but this version of numpy is"
     r"|module was compiled against NumPy C-API version 0x[0-9a-f]+ .*but the running NumPy has C-API version"
     r"|AttributeError: _ARRAY_API not found",
     "NumPy: an extension built against another NumPy ABI"),
    ("python_env", "other", 3.0,
     r"Descriptors cannot be created directly|your generated code is out of date and must be regenerated with protoc"
     r"|Detected (incompatible|mismatched) Protobuf Gencode/Runtime",
     "protobuf: generated code and runtime of different versions"),
    ("python_env", "other", 3.0,
     r"is required for a normal functioning of this module, but found"
     r"|distribution was not found and is required by this application",
     "transformers: a dependency at another version than it requires"),
    ("python_env", "other", 3.0, r"PyTorch and TorchAudio were compiled with different CUDA versions",
     "torchaudio built for another CUDA than torch"),

    # The package managers' solvers finding no set of versions that satisfies the requirements (an
    # image build or an entrypoint's install step), in their own words: the environment's, 3.
    #   pypa/pip src/pip/_internal/resolution/resolvelib/factory.py get_installation_error:
    #     logger.critical "Cannot install X and Y because these package versions have conflicting
    #     dependencies.", then DistributionNotFound "ResolutionImpossible: for help visit ...". Its
    #     warning after an install that went through ("pip's dependency resolver does not currently take
    #     into account all the packages that are installed", commands/install.py) is not taken.
    #   conda/conda conda/exceptions.py UnsatisfiableError: "The following specifications were found to
    #     be incompatible with each other:" (and, over two lines, "... incompatible with a past" /
    #     "explicit spec ..." and "... were found" / "to be incompatible with the existing python
    #     installation in your environment:"), after conda/resolve.py's "Found conflicts! Looking for
    #     incompatible packages." (2: it announces the search, the verdict follows). Its "... found to be
    #     incompatible with your system" is a virtual package (__cuda: the driver's CUDA, __glibc) and is
    #     not taken.
    #   conda/conda-libmamba-solver conda_libmamba_solver/exceptions.py LibMambaUnsatisfiableError,
    #     printed by its class name before the problems libmamba lists, 2.5: those may be a __cuda the
    #     host driver does not provide, which a driver signal then outweighs.
    #   astral-sh/uv crates/uv-resolver/src/error.rs NoSolutionHeader: "No solution found when
    #     resolving dependencies:" (and "... resolving build dependencies", "... for split").
    ("python_env", "other", 3.0,
     r"because these package versions have conflicting dependencies|ResolutionImpossible: for help visit",
     "pip: the requirements cannot be resolved together"),
    ("python_env", "other", 3.0,
     r"The following specifications were found to be incompatible with (each other|a past)\b"
     r"|to be incompatible with the existing python installation in your environment",
     "conda: the requested specifications conflict"),
    ("python_env", "other", 2.0, r"Found conflicts! Looking for incompatible packages",
     "conda: its solver found conflicts (the verdict follows)"),
    ("python_env", "other", 2.5, r"LibMambaUnsatisfiableError", "conda (libmamba): the environment cannot be solved"),
    ("python_env", "other", 3.0, r"No solution found when resolving (\S+ )?dependencies",
     "uv: the requirements cannot be resolved together"),

    # Extensions built in the image at install or run time, refused by the build's own checks: the
    # image's compilers and toolkit, not the driver (the "CUDA version" both name is the toolkit's
    # nvcc), 3.
    #   The CUDA toolkit's include/crt/host_config.h, which nvcc includes in every compile: "#error --
    #     unsupported GNU version! gcc versions later than N are not supported! The nvcc flag
    #     '-allow-unsupported-compiler' can be used to override this version check" and "unsupported
    #     clang version! clang version must be less than N" (a host compiler newer than the toolkit).
    #     The same header's "#warning crt/host_config.h is an internal header file" is not taken.
    #   pytorch/pytorch torch/utils/cpp_extension.py CUDA_MISMATCH_MESSAGE: RuntimeError "The detected
    #     CUDA version (X) mismatches the version that was used to compile PyTorch (Y). Please make sure to
    #     use the same CUDA versions." (the toolkit under CUDA_HOME against torch's); its
    #     CUDA_MISMATCH_WARN, "has a minor version mismatch ... Most likely this shouldn't be a problem",
    #     goes on and is not taken.
    ("python_env", "other", 3.0,
     r"unsupported GNU version! gcc versions later than \S+ are not supported"
     r"|unsupported clang version! clang version must be less than",
     "nvcc: the image's host compiler is newer than its CUDA toolkit supports"),
    ("python_env", "other", 3.0,
     r"The detected CUDA version \(\S+\) mismatches the version that was used to compile",
     "torch cpp_extension: the CUDA toolkit differs from torch's"),

    # A server given a model without a chat template and no --chat-template (huggingface/transformers
    # src/transformers/tokenization_utils_base.py get_chat_template: ValueError "Cannot use chat template
    # functions because tokenizer.chat_template is not set and no template argument was passed!";
    # vllm-project/vllm vllm/renderers/hf.py safe_apply_chat_template, earlier
    # vllm/entrypoints/chat_utils.py: "As of transformers v4.44, default chat template is no longer
    # allowed, so you must provide a chat template if the tokenizer does not define one.", the 400 a chat
    # request gets): the launch arguments and the model's files, 3. Ollama asking its registry for a
    # model or tag it does not have (ollama/ollama server/images.go PullModel: "pull model manifest: %s"
    # of os.ErrNotExist, the registry's 404, which cmd/cloud_suggest.go names pullModelNotFoundMessage):
    # the model's name, as transformers' "not a valid model identifier", 3.
    ("config", "other", 3.0,
     r"Cannot use chat template functions because tokenizer\.chat_template is not set"
     r"|default chat template is no longer allowed",
     "no chat template for the model and none given"),
    ("hub_access", "other", 3.0, r"pull model manifest: file does not exist",
     "Ollama: the registry has no such model or tag"),

]

SIGNALS: tuple[Signal, ...] = tuple(
    Signal(fam, cat, re.compile(rx, re.I), w, why, re.compile(folded(rx))) for fam, cat, w, rx, why in _TABLE)

FAMILIES: dict[str, str] = {s.family: s.category for s in SIGNALS}
