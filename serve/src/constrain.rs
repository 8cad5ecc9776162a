//! Output constraints as a token mask per step: a grammar (a JSON schema, or a tool call's
//! Lark grammar from `tools`) compiled by llguidance over the model's vocabulary, so a
//! sampled token can only continue text the grammar accepts, whatever the weights say.
//!
//! Why llguidance rather than a grammar engine of our own: it is maintained for exactly this
//! and already serves llama.cpp (its LLAMA_LLGUIDANCE backend), vLLM and SGLang; it covers
//! JSON Schema (refs, anyOf, numeric ranges, string lengths, patterns) and Lark; and its
//! token trie computes a 152k-vocabulary mask in a fraction of a millisecond (0.2-0.3 ms
//! measured, docs/measurements/2026-12-05-serve-agents.md), where a hand-written engine
//! would walk every token's bytes each step.

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use rocky_generate::Constraint;
use rocky_models::tokenizer::{TokenKind, Tokenizer};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        Self::from_words(&words, tokenizer.eos_id().unwrap_or(0))
    }

    /// Token `i` spells `words[i]`; `eos` is the end token.
    pub fn from_words(words: &[Vec<u8>], eos: u32) -> Result<Grammars, String> {
        let info = TokRxInfo::new(words.len() as u32, eos);
        let trie = TokTrie::from(&info, words);
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
            spent: Duration::ZERO,
            masks: 0,
            prepared: None,
        })
    }
}

/// One request's grammar state.
pub struct Guide {
    matcher: Matcher,
    /// The trie's end token: allowed where the grammar may end, which lets the model's own
    /// end-of-generation tokens through.
    eos: u32,
    /// Time in [`Constraint::mask`] and [`Constraint::accept`] so far: the grammar's share of
    /// the decode steps, reported in the reply's `timings`.
    spent: Duration,
    /// Masks computed so far (one per sampled token).
    masks: usize,
    /// The next mask, computed ahead of the logits by [`Constraint::prepare`] (while the
    /// device evaluates the step); `mask` takes it, or computes it where none is ready.
    prepared: Option<SimpleVob>,
}

impl Guide {
    /// The time the grammar took (mask, applying it and advancing the parser) and the number
    /// of masks it computed.
    pub fn cost(&self) -> (Duration, usize) {
        (self.spent, self.masks)
    }

    fn next_mask(&mut self) -> Result<SimpleVob, String> {
        self.matcher
            .compute_mask_or_eos()
            .map_err(|e| e.to_string())
    }

    fn mask_timed(&mut self, logits: &mut [f32], end: &[u32]) -> Result<(), String> {
        let mask = match self.prepared.take() {
            Some(mask) => mask,
            None => self.next_mask()?,
        };
        let may_end = mask.is_allowed(self.eos);
        // The model's end tokens (end of turn, EOS) are the grammar's one "end" token: their
        // logits are kept where the grammar may end, whatever the trie says of each.
        let ends: Vec<(usize, f32)> = end
            .iter()
            .filter_map(|&id| logits.get(id as usize).map(|&l| (id as usize, l)))
            .collect();
        // 32 tokens per word of the mask; a zero word (most of them) forbids 32 at once.
        let words = mask.as_slice();
        // A forbidden word is a plain fill (the compiler vectorizes it): this runs between
        // the step's logits and the draw, on the decode's critical path.
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            match words.get(w).copied().unwrap_or(0) {
                u32::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                bits => {
                    for (b, l) in chunk.iter_mut().enumerate() {
                        if bits >> b & 1 == 0 {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
        for (id, l) in ends {
            logits[id] = if may_end { l } else { f32::NEG_INFINITY };
        }
        Ok(())
    }
}

impl Constraint for Guide {
    fn mask(&mut self, logits: &mut [f32], end: &[u32]) -> Result<(), String> {
        let start = Instant::now();
        let r = self.mask_timed(logits, end);
        self.spent += start.elapsed();
        self.masks += 1;
        r
    }

    fn accept(&mut self, token: u32) -> Result<(), String> {
        let start = Instant::now();
        self.prepared = None;
        let r = self.matcher.consume_token(token).map_err(|e| e.to_string());
        self.spent += start.elapsed();
        r
    }

    /// The mask's computation, on the generation loop's second thread while the step runs
    /// (its time still counts in [`Guide::cost`]: the grammar's work, overlapped or not).
    fn prepare(&mut self) -> Result<(), String> {
        if self.prepared.is_none() {
            let start = Instant::now();
            let mask = self.next_mask();
            self.spent += start.elapsed();
            self.prepared = Some(mask?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Piece, ToolFormat, ToolStream};
    use rand::{Rng, SeedableRng};
    use serde_json::{json, Value};

    /// A vocabulary of the 256 bytes, a few multi-byte tokens, and an end token (the last).
    fn words() -> Vec<Vec<u8>> {
        let mut w: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for t in ["<tool_call>", "\"name\": \"", "{\"", "\n", "true", "12"] {
            w.push(t.as_bytes().to_vec());
        }
        w.push(b"\xff<end>".to_vec());
        w
    }

    /// Text drawn from uniformly random logits under `grammar` until the end token.
    fn draw(grammars: &Grammars, grammar: TopLevelGrammar, seed: u64) -> String {
        let words = words();
        let end = [words.len() as u32 - 1];
        let mut guide = grammars.guide(grammar).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut out = Vec::new();
        for _ in 0..2000 {
            let mut logits: Vec<f32> = (0..words.len()).map(|_| rng.gen()).collect();
            guide.mask(&mut logits, &end).unwrap();
            let next = (0..logits.len())
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .unwrap() as u32;
            assert!(logits[next as usize].is_finite(), "something is allowed");
            if end.contains(&next) {
                return String::from_utf8(out).unwrap();
            }
            out.extend_from_slice(&words[next as usize]);
            guide.accept(next).unwrap();
        }
        panic!("no end: {}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn random_logits_under_a_tool_grammar_write_one_valid_call() {
        let grammars = Grammars::from_words(&words(), words().len() as u32 - 1).unwrap();
        let tools = [
            json!({"type": "function", "function": {"name": "pick", "parameters": {
                "type": "object", "properties": {"x": {"enum": ["a", "b"]},
                "n": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["x", "n"], "additionalProperties": false}}}),
            json!({"type": "function", "function": {"name": "flag", "parameters": {
                "type": "object", "properties": {"on": {"type": "boolean"}},
                "required": ["on"], "additionalProperties": false}}}),
        ];
        let chosen: Vec<&Value> = tools.iter().collect();
        for format in [ToolFormat::Hermes, ToolFormat::LlamaJson] {
            for seed in 0..20 {
                let grammar = TopLevelGrammar::from_lark(format.call_grammar(&chosen));
                let text = draw(&grammars, grammar, seed);
                let mut split = ToolStream::new(format);
                let mut pieces = split.push(&text);
                pieces.extend(split.finish());
                let [Piece::Call(call)] = &pieces[..] else {
                    panic!("{format:?} seed {seed}: {text:?} gives {pieces:?}")
                };
                let args: Value = serde_json::from_str(&call.arguments).unwrap();
                match call.name.as_str() {
                    "pick" => {
                        assert!(args["x"] == "a" || args["x"] == "b", "{text}");
                        let n = args["n"].as_i64().unwrap();
                        assert!((1..=9).contains(&n), "{text}");
                        assert_eq!(args.as_object().unwrap().len(), 2, "{text}");
                    }
                    "flag" => assert!(args["on"].is_boolean(), "{text}"),
                    other => panic!("{other} is no tool: {text}"),
                }
            }
        }
    }

    #[test]
    fn a_schema_llguidance_cannot_compile_is_an_error_not_a_panic() {
        let grammars = Grammars::from_words(&words(), words().len() as u32 - 1).unwrap();
        let bad = json!({"type": "string", "pattern": "("});
        assert!(grammars
            .guide(TopLevelGrammar::from_json_schema(bad))
            .is_err());
    }
}
