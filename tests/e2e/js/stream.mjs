// Streams one reply from chatstream's /v1 with the Vercel AI SDK, as any application would:
//   node stream.mjs <base URL of the stack> <chat|responses|compatible> <model> <message>
// chat and responses: @ai-sdk/openai's Chat Completions and Responses providers; compatible: the Chat Completions
// provider of @ai-sdk/openai-compatible, which reads the reasoning of reasoning_content chunks.
// The API key is CHATSTREAM_API_KEY when set (the access token of a relay in the JWT mode), else 'unused'.
// Prints one JSON line: the text as streamed (the concatenated text deltas) and their number, the reasoning as
// streamed (the concatenated reasoning deltas) and the number of reasoning parts the SDK opened, the finish reason
// and the usage.
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { streamText } from 'ai';

const [baseUrl, api, model, prompt] = process.argv.slice(2);
if (!baseUrl || !['chat', 'responses', 'compatible'].includes(api) || !model || !prompt) {
  console.error('usage: node stream.mjs <base URL> <chat|responses|compatible> <model> <message>');
  process.exit(2);
}

const options = { baseURL: `${baseUrl}/v1`, apiKey: process.env.CHATSTREAM_API_KEY || 'unused' };
const openai = createOpenAI(options);
const chosen = {
  chat: () => openai.chat(model),
  responses: () => openai.responses(model),
  compatible: () => createOpenAICompatible({ ...options, name: 'chatstream', includeUsage: true }).chatModel(model),
}[api]();
const result = streamText({
  model: chosen,
  prompt,
  onError: ({ error }) => {
    console.error(String(error?.stack ?? error));
    process.exitCode = 1;
  },
});

const deltas = [];
const reasoning = [];
let reasoningParts = 0;
for await (const part of result.fullStream) {
  if (part.type === 'text-delta') deltas.push(part.text);
  else if (part.type === 'reasoning-start') reasoningParts += 1;
  else if (part.type === 'reasoning-delta') reasoning.push(part.text);
}
const [finishReason, usage] = await Promise.all([result.finishReason, result.usage]);
console.log(
  JSON.stringify({
    text: deltas.join(''),
    deltas: deltas.length,
    reasoning: reasoning.join(''),
    reasoningParts,
    finishReason,
    usage,
  }),
);
