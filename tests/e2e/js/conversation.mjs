// Holds a two-turn conversation with chatstream's /v1 through the Vercel AI SDK, as useChat and generateText
// applications do: the first turn's response messages appended to the message list, then the next user message.
//   node conversation.mjs <base URL of the stack> <chat|responses> <model> <first message> <second message>
// Prints one JSON line: both replies' text and the input the SDK sent for the second turn (the Responses provider
// sends earlier output as item references).
import { createOpenAI } from '@ai-sdk/openai';
import { generateText } from 'ai';

const [baseUrl, api, model, first, second] = process.argv.slice(2);
if (!baseUrl || !['chat', 'responses'].includes(api) || !model || !first || !second) {
  console.error('usage: node conversation.mjs <base URL> <chat|responses> <model> <first message> <second message>');
  process.exit(2);
}

const bodies = [];
const recordingFetch = async (url, init) => {
  bodies.push(JSON.parse(init.body));
  return fetch(url, init);
};
const openai = createOpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'unused', fetch: recordingFetch });
const chosen = api === 'chat' ? openai.chat(model) : openai.responses(model);

const messages = [{ role: 'user', content: first }];
const firstReply = await generateText({ model: chosen, messages, maxRetries: 0 });
messages.push(...firstReply.response.messages, { role: 'user', content: second });
const secondReply = await generateText({ model: chosen, messages, maxRetries: 0 });
const sent = bodies.at(-1);
console.log(JSON.stringify({ first: firstReply.text, second: secondReply.text, sent: sent.input ?? sent.messages }));
