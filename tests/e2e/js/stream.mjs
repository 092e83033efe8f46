// Streams one reply from chatstream's /v1 with the Vercel AI SDK, as any application would:
//   node stream.mjs <base URL of the stack> <chat|responses> <model> <message>
// Prints one JSON line: the text as streamed (the concatenated text deltas), the finish reason and the usage.
import { createOpenAI } from '@ai-sdk/openai';
import { streamText } from 'ai';

const [baseUrl, api, model, prompt] = process.argv.slice(2);
if (!baseUrl || !['chat', 'responses'].includes(api) || !model || !prompt) {
  console.error('usage: node stream.mjs <base URL> <chat|responses> <model> <message>');
  process.exit(2);
}

const openai = createOpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'unused' });
const result = streamText({
  model: api === 'chat' ? openai.chat(model) : openai.responses(model),
  prompt,
  onError: ({ error }) => {
    console.error(String(error?.stack ?? error));
    process.exitCode = 1;
  },
});

const deltas = [];
for await (const delta of result.textStream) {
  deltas.push(delta);
}
const [finishReason, usage] = await Promise.all([result.finishReason, result.usage]);
console.log(JSON.stringify({ text: deltas.join(''), deltas: deltas.length, finishReason, usage }));
