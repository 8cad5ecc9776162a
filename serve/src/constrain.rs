//! Output constraints as a token mask per step: a grammar (a JSON schema, or a tool call's
//! Lark grammar from `tools`) compiled by llguidance over the model's vocabulary, so a
//! sampled token can only continue text the grammar accepts, whatever the weights say.
//!
//! Why llguidance rather than a grammar engine of our own: it is the engine llama.cpp,
//! vLLM, SGLang and OpenAI's own structured outputs use; it covers JSON Schema (refs,
//! anyOf, numeric ranges, string lengths, patterns) and Lark; and its token trie computes a
//! 152k-vocabulary mask in tens of microseconds, where a hand-written engine would have to
//! walk every token's bytes each step.

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use rocky_generate::Constraint;
use rocky_models::tokenizer::{TokenKind, Tokenizer};
use std::sync::Arc;

/// The vocabulary's token trie and llguidance's parser factory: built once per model (on the
/// first constrained request), shared by every grammar.
pub struct Grammars {
    factory: ParserFactory,
}

impl Grammars {
    /// Token `i` is its bytes; control tokens (`<|im_end|>` and the like) are marked as
    /// special (llguidance's 0xFF prefix), so no grammar text can spell them.
    pub fn new(tokenizer: &Tokenizer) -> Result<Grammars, String> {
        let n = tokenizer.vocab_size();
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| match tokenizer.token_kind(id) {
                Some(TokenKind::Control) => {
                    let mut w = vec![0xff];
                    w.extend(tokenizer.token_text(id).unwrap_or_default().bytes());
                    w
                }
                _ => tokenizer.token_bytes(id).unwrap_or_default(),
            })
            .collect();
        let eos = tokenizer.eos_id().unwrap_or(0);
        let info = TokRxInfo::new(n as u32, eos);
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(Grammars { factory })
    }

    /// A constraint following `grammar` from its start.
    pub fn guide(&self, grammar: TopLevelGrammar) -> Result<Guide, String> {
        let parser = self.factory.create_parser(grammar);
        let matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(e);
        }
        Ok(Guide {
            matcher,
            eos: self.factory.tok_env().tok_trie().eos_token(),
        })
    }
}

/// One request's grammar state.
pub struct Guide {
    matcher: Matcher,
    /// The trie's end token: allowed where the grammar may end, which lets the model's own
    /// end-of-generation tokens through.
    eos: u32,
}

impl Constraint for Guide {
    fn mask(&mut self, logits: &mut [f32], end: &[u32]) -> Result<(), String> {
        let mask = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| e.to_string())?;
        let may_end = mask.is_allowed(self.eos);
        // The model's end tokens (end of turn, EOS) are the grammar's one "end" token: their
        // logits are kept where the grammar may end, whatever the trie says of each.
        let ends: Vec<(usize, f32)> = end
            .iter()
            .filter_map(|&id| logits.get(id as usize).map(|&l| (id as usize, l)))
            .collect();
        // 32 tokens per word of the mask; a zero word (most of them) forbids 32 at once.
        let words = mask.as_slice();
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = words.get(w).copied().unwrap_or(0);
            if bits == u32::MAX {
                continue;
            }
            for (b, l) in chunk.iter_mut().enumerate() {
                if bits >> b & 1 == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        for (id, l) in ends {
            logits[id] = if may_end { l } else { f32::NEG_INFINITY };
        }
        Ok(())
    }

    fn accept(&mut self, token: u32) -> Result<(), String> {
        self.matcher.consume_token(token).map_err(|e| e.to_string())
    }
}
