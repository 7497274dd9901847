#!/usr/bin/env python3
"""Trains the bundled digits classifier of `examples/digits` and writes its files.

scikit-learn's bundled 8x8 handwritten digits (1797 images, pixel values 0..16)
are split 80/20 with a fixed seed; an MLP (64 -> 64 ReLU -> 10, softmax) is
trained with scikit-learn and exported by hand as an ONNX graph
(Gemm, Relu, Gemm, Softmax; opset 13). The test split and the predictions of
onnxruntime on it are written next to the model, so the Rust example can
report its accuracy and its agreement with the reference.

Run from the repository root (needs scikit-learn, onnx, onnxruntime, numpy):
    python3 tools/train_digits.py
Outputs in examples/digits/model/:
    digits.onnx                the trained model, input float[N,64] (pixels / 16)
    test_images.bin            u8[360*64], pixel values 0..16, row-major
    test_labels.bin            u8[360], the true digit of every image
    reference_predictions.bin  u8[360], onnxruntime's argmax for every image
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

OUT = os.path.join("examples", "digits", "model")


def main():
    digits = load_digits()
    x = digits.data.astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=360, random_state=7, stratify=y
    )
    clf = MLPClassifier(hidden_layer_sizes=(64,), max_iter=600, random_state=7)
    clf.fit(x_train / 16.0, y_train)
    print(f"scikit-learn test accuracy: {clf.score(x_test / 16.0, y_test):.4f}")

    w1, w2 = (w.astype(np.float32) for w in clf.coefs_)
    b1, b2 = (b.astype(np.float32) for b in clf.intercepts_)
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["pixels", "w1", "b1"], ["h"], name="fc1"),
            helper.make_node("Relu", ["h"], ["h_relu"], name="relu1"),
            helper.make_node("Gemm", ["h_relu", "w2", "b2"], ["logits"], name="fc2"),
            helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
        ],
        "digits",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10])],
        initializer=[
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b2, "b2"),
        ],
    )
    graph.doc_string = "8x8 digit classifier: pixels / 16 in, class probabilities out"
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13)],
        producer_name="onnx-codegen tools/train_digits.py",
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(OUT, exist_ok=True)
    onnx.save(model, os.path.join(OUT, "digits.onnx"))

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    probs = sess.run(None, {"pixels": x_test / 16.0})[0]
    pred = probs.argmax(axis=1)
    print(f"onnxruntime test accuracy:  {(pred == y_test).mean():.4f}")
    x_test.astype(np.uint8).tofile(os.path.join(OUT, "test_images.bin"))
    y_test.astype(np.uint8).tofile(os.path.join(OUT, "test_labels.bin"))
    pred.astype(np.uint8).tofile(os.path.join(OUT, "reference_predictions.bin"))


if __name__ == "__main__":
    main()
