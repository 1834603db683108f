// A two-turn chat with the Vercel AI SDK's OpenAI Responses provider (store: true, its
// default, so the second turn sends the first answer as an item_reference). Prints both
// turns' text and ids as one JSON line.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText } from "ai";

const openai = createOpenAI({ baseURL: `${process.env.BASE_URL}/v1`, apiKey: "test-key" });
const model = openai.responses("embedded");
const messages = [{ role: "user", content: "alpha beta [[words 2]]" }];
const first = await generateText({ model, messages, maxRetries: 0 });
messages.push(...first.response.messages);
messages.push({ role: "user", content: "gamma [[words 1]]" });
const second = await generateText({ model, messages, maxRetries: 0 });
console.log(
  JSON.stringify({
    first: { id: first.response.id, text: first.text },
    second: { id: second.response.id, text: second.text, inputTokens: second.usage.inputTokens },
  }),
);
