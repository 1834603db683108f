// The openai npm package's WebSocket mode against a durable-responses server: one create
// over the socket, steered once after three words; prints what was seen as one JSON line.
// (openai 7.55.0 has no `client.responses.connect()`; its socket is `ResponsesWS`.)
import OpenAI from "openai";
import { ResponsesWS } from "openai/resources/responses/ws";

const client = new OpenAI({ baseURL: `${process.env.BASE_URL}/v1`, apiKey: "node-key" });
const socket = new ResponsesWS(client);
const events = [];
let target = null;
let deltas = 0;

const successor = new Promise((resolve, reject) => {
  socket.on("error", reject);
  socket.on("close", (code, reason) => reject(new Error(`closed ${code} ${reason}`)));
  socket.on("event", (event) => {
    events.push({ type: event.type, id: event.response?.id ?? null, stream_id: event.stream_id });
    if (event.type === "response.created" && target === null) target = event.response.id;
    if (event.type === "response.output_text.delta" && ++deltas === 3) {
      socket.send({
        type: "response.steer",
        previous_response_id: target,
        input: "from node [[words 3]]",
      });
    }
    if (event.type === "response.completed") resolve(event.response);
  });
});
const deadline = setTimeout(() => {
  console.error("no successor within 20 s");
  process.exit(1);
}, 20_000);

socket.send({
  type: "response.create",
  model: "embedded",
  input: "node [[words 200]] [[delay 30]]",
  stream_id: "node",
});
const final = await successor;
clearTimeout(deadline);
socket.close({ code: 1000, reason: "done" });
console.log(
  JSON.stringify({
    target,
    successor: final.id,
    previous: final.previous_response_id,
    text: final.output[0].content[0].text,
    events,
  }),
);
