// Runs a multi-step tool loop against chatstream's /v1 with the Vercel AI SDK, as an agent does: streamText with two
// tools that have `execute`, and `stopWhen: stepCountIs(n)`, so the SDK runs the calls the model makes and sends
// their results back until the model answers in text.
//   node tools.mjs <base URL of the stack> <chat|responses> <model> <message>
// Prints one JSON line: each step (its finish reason, text and tool calls), the calls the tools executed, each call's
// input as streamed (the concatenated tool-input-delta parts), and the final text.
import { createOpenAI } from '@ai-sdk/openai';
import { stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

const [baseUrl, api, model, prompt] = process.argv.slice(2);
if (!baseUrl || !['chat', 'responses'].includes(api) || !model || !prompt) {
  console.error('usage: node tools.mjs <base URL> <chat|responses> <model> <message>');
  process.exit(2);
}

const openai = createOpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'unused' });
const executed = [];
const result = streamText({
  model: api === 'chat' ? openai.chat(model) : openai.responses(model),
  prompt,
  tools: {
    get_weather: tool({
      description: 'The weather in a city.',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        executed.push({ name: 'get_weather', input: { city } });
        return `sunny in ${city}`;
      },
    }),
    get_time: tool({
      description: 'The time now.',
      inputSchema: z.object({}),
      execute: async () => {
        executed.push({ name: 'get_time', input: {} });
        return 'noon';
      },
    }),
  },
  stopWhen: stepCountIs(4),
  maxRetries: 0,
  onError: ({ error }) => {
    console.error(String(error?.stack ?? error));
    process.exitCode = 1;
  },
});

const streamedInputs = {};
const errors = [];
for await (const part of result.fullStream) {
  if (part.type === 'tool-input-delta') streamedInputs[part.id] = (streamedInputs[part.id] ?? '') + part.delta;
  else if (part.type === 'tool-error' || part.type === 'error') errors.push(String(part.error));
}
const steps = await result.steps;
console.log(
  JSON.stringify({
    steps: steps.map((step) => ({
      finishReason: step.finishReason,
      text: step.text,
      toolCalls: step.toolCalls.map((call) => ({ id: call.toolCallId, name: call.toolName, input: call.input })),
    })),
    executed,
    streamedInputs,
    errors,
    text: await result.text,
  }),
);
