"""A tiny random Llama that vLLM's CPU build serves offline: saved with save_pretrained, with
a tokenizer trained here from a few sentences (no download). head_dim is 32: vLLM's CPU
attention refuses 16."""

import os

WORDS = ("the cat sat on a mat and the dog ran to the park while birds sang in old trees "
         "near a quiet river under grey skies every morning").split()


def make(directory):
    """Writes the model and tokenizer into `directory` (once); returns it."""
    if os.path.exists(os.path.join(directory, "config.json")):
        return directory
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS)] * 4, trainers.WordLevelTrainer(
        special_tokens=["<unk>", "<s>", "</s>"], vocab_size=128))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      head_dim=32, max_position_embeddings=256, bos_token_id=1,
                      eos_token_id=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory


if __name__ == "__main__":
    import sys
    print(make(sys.argv[1]))
